"""Two releases on one local stack (docs/upgrading.md): the previous release's function workers beside
this one's on the same storage, queues and services, under faults, lose nothing; and a rollback before
the formats switch, the previous release's whole local stack finishing on this one's data folder what this
one started, loses nothing. Both on orders of the workflows both releases declare: one declared since is
not the previous release's to run.
The previous release runs its own code throughout (devhost.releases: its commit, from this history)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost import releases
from engine.workflow import WorkflowDefinition
from tests.e2e.conftest import (
    LAST_STEP,
    SERVICES,
    WORKFLOWS,
    LocalStack,
    start_stack,
    stop_stack,
    straight_id,
)

PREVIOUS = "1.0.0"
PER_WORKFLOW = 6
SEALED = "sealed:v1:"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return releases.checkout(PREVIOUS, tmp_path_factory.mktemp("release"))
    except releases.ReleaseUnavailable as exc:  # a shallow clone: no history to take it from
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def shared(previous: Path) -> list[WorkflowDefinition]:
    """The workflows new orders run here that the previous release declares too (the same name and version,
    which a release never changes): one declared since (a workflow of its own, a new version) is not the
    previous release's to run, and its services are not its simulators' to serve."""
    script = (
        "import json\nfrom orders.catalog import CATALOG\n"
        "print(json.dumps([[w.name, w.version] for w in CATALOG.workflows]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=previous,
        env={**os.environ, "PYTHONPATH": releases.package_path(previous)},
        capture_output=True,
        text=True,
        check=True,
    )
    declared = {(name, version) for name, version in json.loads(done.stdout)}
    found = [w for w in WORKFLOWS if (w.name, w.version) in declared]
    if not found:
        pytest.skip(f"release {PREVIOUS} declares none of the workflows new orders run here")
    return found


def submit_every_workflow(stack: LocalStack, workflows: list[WorkflowDefinition]) -> list[str]:
    """Orders of every workflow of ``workflows``, on paths that make every call."""
    return [stack.submit(straight_id(w), w) for w in workflows for _ in range(PER_WORKFLOW)]


def lose_nothing(stack: LocalStack, order_ids: list[str]) -> None:
    """Every order Processed, every effect once (the ledger check), no message dead-lettered, and no
    service sent a value sealed by one release that the other could not open."""
    ended = {order_id: stack.wait_terminal(order_id, timeout=180)["processState"] for order_id in order_ids}
    assert set(ended.values()) == {"Processed"}, ended
    assert stack.ledger_problems(order_ids) == []
    counts = stack.api.get("/api/deadletters").json()["items"]
    assert [c for c in counts if c["count"]] == [], counts
    assert SEALED not in json.dumps(stack.ledger()), "a service was sent a sealed value"


@pytest.fixture
def side_by_side(tmp_path: Path, previous: Path) -> Iterator[LocalStack]:
    # Before the switch, as during a deployment: the formats the previous release reads.
    stack = start_stack(tmp_path / "devhost", workers=1, beside=previous, beside_workers=1, hold_formats=True)
    try:
        yield stack
    finally:
        stop_stack(stack)


def test_the_previous_release_beside_this_one_under_faults_loses_nothing(
    side_by_side: LocalStack, shared: list[WorkflowDefinition]
) -> None:
    stack = side_by_side
    stack.faults(**{service: {"transientRate": 0.3} for service in SERVICES})
    order_ids = submit_every_workflow(stack, shared)
    lose_nothing(stack, order_ids)
    # Both did the work: each release's worker ran Agents and applied replies.
    for n in (1, 2):
        log = stack.worker_log(n)
        assert "engine.agent: replied" in log and "engine.scheduler: reply applied" in log, f"worker {n}"


def test_a_rollback_before_the_switch_finishes_what_this_release_started(
    tmp_path: Path, previous: Path, shared: list[WorkflowDefinition]
) -> None:
    data_dir = tmp_path / "devhost"
    stack = start_stack(data_dir, workers=1, hold_formats=True)
    try:
        # This release takes every order to its last call, where the service hangs: mid-flight when it goes.
        stack.faults(**{LAST_STEP.call_agent: {"hangRate": 1, "hangMs": 60_000}})
        order_ids = submit_every_workflow(stack, shared)
        stack.wait_hung(LAST_STEP.call_agent, more_than=PER_WORKFLOW - 1)
    finally:
        stop_stack(stack)
    # The previous release's whole local stack on this one's data folder: its devhost, simulators (the
    # ledger this one wrote), emulator and workers.
    rolled_back = start_stack(data_dir, workers=2, extra_env={"PYTHONPATH": releases.package_path(previous)})
    assert "version" not in rolled_back.api.get("/api/health").json()  # 1.0.0 answers {"status": "ok"}
    try:
        lose_nothing(rolled_back, order_ids)
    finally:
        stop_stack(rolled_back)
