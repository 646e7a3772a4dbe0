"""The walk-through of docs/customizing.md, performed on a copy of the repository: declare a service and a
step on it (the page's own code, nothing else), regenerate, run an order through it end to end, then run
there the tests that must not depend on the workflow (``WORKFLOW_INDEPENDENT``), on the copy's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import httpx
import pytest

from orders.catalog import FULFILMENT
from tests.e2e.conftest import FAST_SETTINGS, new_order
from tests.e2e.repo_copy import ROOT, RepoCopy, blocks, files
from tests.support import wait_for

DOC = ROOT / "docs" / "customizing.md"

# The tests that follow the declaration instead of naming the example workflows: the engine, the adapters,
# the local runtime, the infrastructure, and the order path through the whole local stack (a straight run,
# its status messages, a compensation, a Supervisor recovery, the operations it costs). The walk-through
# runs them again on the copy with its step and service added; docs/customizing.md lists them. Of the
# Service Bus emulator, only the test of the queue configuration generated from the declaration: the rest
# reads nothing the declaration changes, and would add three minutes.
WORKFLOW_INDEPENDENT = (
    "tests/engine",
    "tests/adapters",
    "tests/devhost",
    "tests/servicebus_emulator/test_config.py",
    "tests/simulators",
    "tests/infra",
    "tests/e2e/test_recovery.py::test_happy_path",
    "tests/e2e/test_recovery.py::test_status_messages_carry_the_order_id",
    "tests/e2e/test_recovery.py::test_permanent_failure_at_the_last_step_compensates_in_reverse",
    "tests/e2e/test_recovery.py::test_hang_past_complete_by_is_recovered_by_the_supervisor",
    "tests/e2e/test_operation_counts.py",
)
# The packages the copy must import from its own src/ (and its tests from its own tests/).
PACKAGES = ("engine", "adapters", "devhost", "orders", "servicebus_emulator", "simulators", "tests")


def walk_through(copy: RepoCopy) -> None:
    """Every edit the page asks for: its files, its diff, then ``make generate``'s command."""
    page = DOC.read_text(encoding="utf-8")
    declared = files(page)
    assert declared, "docs/customizing.md lost its service file"
    for path, text in declared:
        copy.write(path, text)
    (diff,) = blocks(page, "diff")
    copy.apply(diff)
    copy.run("-m", "orders.generate")


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> RepoCopy:
    """A copy of the repository with the walk-through applied, shared by this module's tests."""
    copy = RepoCopy.make(tmp_path_factory.mktemp("walked") / "repo")
    walk_through(copy)
    return copy


@pytest.mark.timeout(300)
def test_the_walk_through_adds_a_step_and_its_service_and_an_order_runs_through_it(
    walked: RepoCopy, tmp_path: Path
) -> None:
    copy = walked
    # What the page promised is derived: the new queue for the emulator, and a generated file up to date.
    assert '"agent-invoicing"' in copy.read("local/servicebus-config.json")
    copy.run("-m", "orders.generate", "--check")
    running = copy.start(tmp_path / "devhost", FAST_SETTINGS)
    try:
        with httpx.Client(base_url=running.api_url, timeout=10) as api:
            accepted = api.post("/api/orders", json=new_order("walk-1"))
            assert accepted.status_code == 202, accepted.text

            def finished() -> dict | None:
                order = api.get("/api/orders/walk-1").json()
                return order if order["processState"] in ("Processed", "Compensated", "Error") else None

            order = wait_for(finished, timeout=60, interval=0.2, what="the order to finish")
        assert order["processState"] == "Processed", order
        # The page's new version of the fulfilment workflow: its invoice step before the last step.
        assert (order["workflow"], order["workflowVersion"]) == (FULFILMENT.name, FULFILMENT.version + 1)
        *before, last = (step.name for step in FULFILMENT.steps)
        assert [s["name"] for s in order["steps"]] == [*before, "issue-invoice", last]
        ledger = httpx.get(f"{running.simulators_url}/ledger", timeout=10).json()
        invoice = ledger["invoicing"]["walk-1:issue-invoice"]
        assert (invoice["orderId"], invoice["applied"], invoice["compensated"]) == ("walk-1", 1, 0), invoice
    finally:
        running.stop()


def test_the_copy_imports_its_own_code(walked: RepoCopy) -> None:
    """The interpreter, folder and environment the subset runs with take every package from the copy."""
    script = f"import importlib\nfor name in {PACKAGES!r}:\n    print(importlib.import_module(name).__file__)"
    imported = [Path(line) for line in walked.run("-c", script).stdout.split()]
    assert len(imported) == len(PACKAGES)
    outside = [str(path) for path in imported if not path.is_relative_to(walked.root)]
    assert outside == [], f"imported from outside the copy {walked.root}"


@pytest.mark.timeout(1200)
def test_the_workflow_independent_tests_pass_on_the_walked_through_copy(
    walked: RepoCopy, tmp_path: Path
) -> None:
    report = tmp_path / "report.xml"
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    done = subprocess.run(
        [*pytest_command, *WORKFLOW_INDEPENDENT],
        cwd=walked.root,
        env={**os.environ, **walked.env()},
        capture_output=True,
        text=True,
        timeout=1150,
    )
    # pytest's short summary names every failed test and its error, however long the output before it.
    _, found, failed = done.stdout.rpartition("short test summary info")
    summary = (failed if found else done.stdout[-6000:]) + done.stderr[-2000:]
    assert done.returncode == 0, f"the subset failed on the copy (exit {done.returncode}):\n{summary}"
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None, summary
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    assert passed > 0 and counts["failures"] == counts["errors"] == 0, (counts, summary)
