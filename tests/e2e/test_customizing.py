"""The walk-through of docs/customizing.md, performed on a copy of the repository: declare a service and a
step on it, then a workflow of its own (its input, a result passed on, a condition, a step that cannot be
undone), with the page's own code and nothing else; regenerate, run orders through both end to end, then
run there the tests that must not depend on the workflow (``WORKFLOW_INDEPENDENT``), on the copy's code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from orders.catalog import FULFILMENT
from tests.e2e.conftest import FAST_SETTINGS, TERMINAL, new_order
from tests.e2e.repo_copy import ROOT, DiffDoesNotApply, RepoCopy, blocks, files, git_show
from tests.support import wait_for

DOC = ROOT / "docs" / "customizing.md"

# The tests that follow the declaration instead of naming the example workflows: the adapters, the local
# runtime, the infrastructure, and the order path through the whole local stack (a straight run, its status
# messages, a compensation, a Supervisor recovery, the operations it costs). The walk-through runs them
# again on the copy with its step, services and workflow added; docs/customizing.md lists them. Not the
# engine's nor the adapters': neither can import the declaration (tests/test_layers.py), their tests import
# none of it, and the walk-through changes no file of either (UNCHANGED below), so they would be the same
# tests of the same code. Of the Service Bus emulator,
# only the test of the queue configuration generated from the declaration: the rest reads nothing the
# declaration changes.
UNCHANGED = ("src/engine", "src/adapters")
WORKFLOW_INDEPENDENT = (
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

# What the page declares, as its walk-through names it.
INVOICE_STEP = "issue-invoice"
GIFT_CARD = "gift-card"
CHARGE, CARD, EMAIL = "charge-payment", "issue-gift-card", "email-gift-card"
# The page's condition on the e-mail, as the engine words it when it leaves the step out.
EMAIL_LEFT_OUT = "condition not met: input.recipientEmail exists"
NEW_SERVICES = ("invoicing", "giftcards", "mailer")


# The declaration a team edits (docs/customizing.md, "One declaration"): the workflows, their inputs, and a
# module per service beside the services' own code (declaration.py, client.py), which is the product's.
DECLARATION = ("src/orders/catalog.py", "src/orders/inputs.py")
SERVICE_MODULES = "src/orders/services"


def is_service_module(text: str) -> bool:
    """Whether a module of ``SERVICE_MODULES`` declares a service (``SERVICE = ServiceDefinition(...)``)."""
    return re.search(r"^SERVICE = ServiceDefinition\(", text, re.MULTILINE) is not None


def declaration(commit: str | None = None) -> list[str]:
    """The files of the declaration here (``commit`` None) or in ``commit``."""

    def read(path: str) -> str:
        return ((ROOT / path).read_bytes() if commit is None else git_show(commit, path)).decode("utf-8")

    if commit is None:
        names = [path.name for path in (ROOT / SERVICE_MODULES).iterdir()]
    else:
        listed = subprocess.run(
            ["git", "ls-tree", "-z", "--name-only", f"{commit}:{SERVICE_MODULES}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout.decode()
        names = listed.split("\0")
    modules = sorted(f"{SERVICE_MODULES}/{name}" for name in names if name.endswith(".py"))
    return [*DECLARATION, *(module for module in modules if is_service_module(read(module)))]


def page_base(page: str) -> str | None:
    """The last commit that changed the page whose declaration takes the page's edits: the example
    declaration the page was written for. A later commit that changed the page only where it is generated
    (``make generate`` rewrites its tables after a team declares a workflow of its own) holds the team's
    declaration, which the edits no longer apply to: passed over. None: no history holds one."""
    done = subprocess.run(
        ["git", "log", "--format=%H", "--", str(DOC.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    with tempfile.TemporaryDirectory() as scratch:
        for n, commit in enumerate(done.stdout.split()):
            try:
                edit_files(Path(scratch) / str(n), page, lambda path, commit=commit: git_show(commit, path))
            except (DiffDoesNotApply, subprocess.CalledProcessError):  # not taken, or a file not there yet
                continue
            return commit
    return None


def walk_through(copy: RepoCopy) -> None:
    """Every edit the page asks for: its files, its diffs in order, then ``make generate``'s command. On the
    declaration as it is here; where a team has made it its own (the page's diffs no longer apply: a
    workflow of its own added, the examples replaced), on the example declaration the page was written
    for, the one of the commit that last changed the page, and a warning says so."""
    page = DOC.read_text(encoding="utf-8")
    declared = files(page)
    assert declared, "docs/customizing.md lost its service files"
    diffs = blocks(page, "diff")
    assert diffs, "docs/customizing.md lost its diffs"
    try:
        _edit(copy, declared, diffs)
    except DiffDoesNotApply as refused:
        base = page_base(page)
        if base is None:
            pytest.skip(
                f"the page's edits do not apply to this declaration, and no history holds its own: {refused}"
            )
        # The team's declaration out, the example one in; the rest of the product's code stays this one.
        copy.restore(sorted({*declaration(), *declaration(base)}), base)
        warnings.warn(
            "docs/customizing.md's edits do not apply to the declaration as it is: walked through on the "
            f"example declaration of {base[:12]}, where the page last changed",
            stacklevel=1,
        )
        _edit(copy, declared, diffs)
    copy.run("-m", "orders.generate")


def _edit(copy: RepoCopy, declared: list[tuple[str, str]], diffs: list[str]) -> None:
    for path, text in declared:
        copy.write(path, text)
    for diff in diffs:
        copy.apply(diff)


def touched(page: str) -> set[str]:
    """The files the page's diffs edit."""
    diffs = blocks(page, "diff")
    return {path for diff in diffs for path in re.findall(r"^\+\+\+ b/(\S+)$", diff, re.MULTILINE)}


def edit_files(dest: Path, page: str, read: Callable[[str], bytes], also: tuple[str, ...] = ()) -> None:
    """The files the page's diffs touch (and ``also``), as ``read`` gives them, copied to ``dest``, then
    every edit of the page in order; raises DiffDoesNotApply if a diff does not take."""
    for path in [*sorted(touched(page)), *also]:
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(read(path))
    _edit(RepoCopy(dest), files(page), blocks(page, "diff"))


def test_the_page_s_edits_apply_to_the_repository_as_it_is_and_pass_the_linters(tmp_path: Path) -> None:
    """Fast: the files the page's diffs touch, copied as they are here (or as the page was written for, see
    :func:`walk_through`), take every diff in order, and the code the team ends up with passes the linters
    ``make test`` runs first."""
    page = DOC.read_text(encoding="utf-8")
    assert touched(page), "the page's diffs name no file"
    try:
        edit_files(tmp_path, page, lambda path: (ROOT / path).read_bytes(), also=("pyproject.toml",))
    except DiffDoesNotApply:
        base = page_base(page)  # a declaration of the team's own: the example one the page was written for
        if base is None:
            pytest.skip("the page's edits do not apply to this declaration, and no history holds its own")
        edit_files(tmp_path, page, lambda path: git_show(base, path), also=("pyproject.toml",))
    written = sorted(touched(page) | {path for path, _ in files(page)})
    ruff = Path(sys.executable).parent / "ruff"
    for command in (["check"], ["format", "--check", "--diff"]):
        done = subprocess.run(
            [str(ruff), *command, *written], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"ruff {command[0]} on the page's code:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> RepoCopy:
    """A copy of the repository with the walk-through applied, shared by this module's tests."""
    copy = RepoCopy.make(tmp_path_factory.mktemp("walked") / "repo")
    walk_through(copy)
    return copy


def examples(copy: RepoCopy, workflow: str) -> list[dict[str, Any]]:
    """The example inputs the copy's declaration gives ``workflow`` (the page's)."""
    script = (
        "import json, sys\nfrom orders.catalog import CATALOG\n"
        "print(json.dumps(CATALOG.current(sys.argv[1]).examples()))"
    )
    found: list[dict[str, Any]] = json.loads(copy.run("-c", script, workflow).stdout)
    return found


def ledger_check(
    copy: RepoCopy, orders: list[dict[str, Any]], ledger: dict[str, Any], data: Path
) -> dict[str, Any]:
    """The copy's own ledger check (over the copy's catalog) of ``orders`` against the simulators' ledger,
    handed over in the file ``data``: its problems and how much of each rule it applied."""
    data.write_text(json.dumps({"orders": orders, "ledger": ledger}), encoding="utf-8")
    script = (
        "import dataclasses, json, sys\nfrom simulators.ledger_check import ledger_report\n"
        "data = json.load(open(sys.argv[1], encoding='utf-8'))\n"
        "print(json.dumps(dataclasses.asdict(ledger_report(data['orders'], data['ledger']))))"
    )
    report: dict[str, Any] = json.loads(copy.run("-c", script, str(data)).stdout)
    return report


def entries(ledger: dict[str, Any], order_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The ledger's entries of one order, by (service, step)."""
    return {
        (service, key.split(":", 1)[1]): entry
        for service, by_key in ledger.items()
        for key, entry in by_key.items()
        if entry["orderId"] == order_id
    }


@pytest.mark.timeout(300)
def test_the_walk_through_s_step_and_workflow_run_through_the_local_stack(
    walked: RepoCopy, tmp_path: Path
) -> None:
    copy = walked
    # What the page promised is derived: the new queues for the emulator, and the generated files up to date.
    config = copy.read("local/servicebus-config.json")
    assert all(f'"agent-{service}"' in config for service in NEW_SERVICES), config
    copy.run("-m", "orders.generate", "--check")
    with_email, without_email = examples(copy, GIFT_CARD)[:2]
    assert "recipientEmail" in with_email and "recipientEmail" not in without_email
    running = copy.start(tmp_path / "devhost", FAST_SETTINGS)
    try:
        with httpx.Client(base_url=running.api_url, timeout=10) as api:

            def submit(order_id: str, body: dict[str, Any]) -> None:
                accepted = api.post("/api/orders", json={**body, "orderId": order_id})
                assert accepted.status_code == 202, accepted.text

            def finished(order_id: str) -> dict[str, Any]:
                def done() -> dict[str, Any] | None:
                    order: dict[str, Any] = api.get(f"/api/orders/{order_id}").json()
                    return order if order["processState"] in TERMINAL else None

                return wait_for(done, timeout=60, interval=0.2, what=f"order {order_id} to finish")

            # The workflow's own input is validated at submission: a field it does not declare is named.
            refused = api.post("/api/orders", json={**with_email, "workflow": GIFT_CARD, "giftWrap": True})
            assert refused.status_code == 400, refused.text
            assert "giftWrap" in [d["field"] for d in refused.json()["error"]["details"]], refused.text

            submit("walk-1", new_order())
            submit("card-1", {**with_email, "workflow": GIFT_CARD})
            submit("card-2", {**without_email, "workflow": GIFT_CARD})
            invoiced, emailed, handed = (finished(o) for o in ("walk-1", "card-1", "card-2"))
            # The e-mail fails for good: the card and the charge before it are undone, the e-mail never is.
            faults = httpx.post(
                f"{running.simulators_url}/faults", json={"mailer": {"permanentRate": 1.0}}, timeout=10
            )
            assert faults.status_code == 200, faults.text
            submit("card-3", {**with_email, "workflow": GIFT_CARD})
            undone = finished("card-3")
            audit = api.get("/api/orders/card-2/audit").json()["items"]
        ledger = httpx.get(f"{running.simulators_url}/ledger", timeout=10).json()
    finally:
        running.stop()

    # The page's new version of the fulfilment workflow: its invoice step after the payment.
    assert invoiced["processState"] == "Processed", invoiced
    assert (invoiced["workflow"], invoiced["workflowVersion"]) == (FULFILMENT.name, FULFILMENT.version + 1)
    names = [step.name for step in FULFILMENT.steps]
    after = names.index("charge-payment") + 1
    assert [s["name"] for s in invoiced["steps"]] == [*names[:after], INVOICE_STEP, *names[after:]]
    invoice = entries(ledger, "walk-1")[("invoicing", INVOICE_STEP)]
    assert (invoice["applied"], invoice["compensated"]) == (1, 0), invoice

    # A recipient: every step runs, and the e-mail carries the number the card's service returned.
    assert emailed["processState"] == "Processed", emailed
    assert [(s["name"], s["state"]) for s in emailed["steps"]] == [
        (CHARGE, "Completed"),
        (CARD, "Completed"),
        (EMAIL, "Completed"),
    ]
    card_number = emailed["steps"][1]["result"]["cardNumber"]
    effects = entries(ledger, "card-1")
    assert {key: (e["applied"], e["compensated"]) for key, e in effects.items()} == {
        ("payment", CHARGE): (1, 0),
        ("giftcards", CARD): (1, 0),
        ("mailer", EMAIL): (1, 0),
    }
    assert effects[("giftcards", CARD)]["result"] == {"cardNumber": card_number}, effects
    # The e-mail's body as the mailer received it, the card's number in it.
    assert effects[("mailer", EMAIL)]["carried"]["cardNumber"] == card_number, effects

    # No recipient: the e-mail is left out by its condition, with the reason, audited, and never called.
    assert handed["processState"] == "Processed", handed
    left_out = handed["steps"][2]
    assert (left_out["name"], left_out["state"], left_out["reason"]) == (EMAIL, "LeftOut", EMAIL_LEFT_OUT)
    audited = [(a["action"], a["actor"].split(":")[0], a["detail"]) for a in audit if a["step"] == EMAIL]
    assert audited == [("left out", "scheduler", EMAIL_LEFT_OUT)], audit
    assert set(entries(ledger, "card-2")) == {("payment", CHARGE), ("giftcards", CARD)}

    # The e-mail refused for good: the card cancelled, naming its number, and the charge refunded; nothing
    # sent.
    assert undone["processState"] == "Compensated", undone
    effects = entries(ledger, "card-3")
    card, charge = effects[("giftcards", CARD)], effects[("payment", CHARGE)]
    # Each undo's body as received: the order and the values its apply returned.
    assert (card["compensated"], card["undoCarried"]) == (1, {"orderId": "card-3", **card["result"]}), card
    assert (charge["compensated"], charge["undoCarried"]) == (1, {"orderId": "card-3", **charge["result"]})
    assert ("mailer", EMAIL) not in effects, effects

    # And the copy's own ledger check, over the copy's declaration: every call carried what it should.
    report = ledger_check(copy, [invoiced, emailed, handed, undone], ledger, tmp_path / "check.json")
    assert report["problems"] == [], report
    assert report["left_out"] >= 1 and report["checked"] >= 3, report


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
    changed = [
        str(path.relative_to(ROOT))
        for folder in UNCHANGED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.read_bytes() != (walked.root / path.relative_to(ROOT)).read_bytes()
    ]
    assert changed == [], f"the walk-through changed code whose tests it does not run again: {changed}"
    report = tmp_path / "report.xml"
    # In one process: this one's worker shares the machine with the rest of the suite already.
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    pytest_command.append(f"--junitxml={report}")
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
