"""The bugs the simulation found, each kept as its seed (``tests/simulation/regressions.py``): the seed
passes, and fails again with the bug put back, so a change that makes the seed miss its bug shows here
(then hunt another: ``python -m tests.simulation.regressions <name>``). Each seed runs on the catalog it was
found on (``tests/simulation/catalogs.py``), whatever the declared one is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from engine import transitions
from engine.decisions import Outcome
from engine.messages import CommandKind, SchedulerCommand
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, WorkflowDefinition
from simulation.run import Result
from tests.simulation.pool import Job, run_all
from tests.simulation.regressions import REGRESSIONS, Regression


def test_a_lost_resume_of_an_undo_is_kicked_again_not_charged() -> None:
    """An undo given back (or cancelled) waits unlocked for a Scheduler; when its command is lost, the
    Supervisor re-sends it, as it does a Pending task's kick, and counts no failure of a step whose undo
    was not even dispatched."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    workflow = WorkflowDefinition(
        name="w", steps=(StepDefinition(name="a", agent="x", action="do", compensation="undo"),)
    )
    record = TaskRecord(
        state=TaskState(
            order_id="o1",
            workflow="w",
            process_state=ProcessState.COMPENSATING,
            phase=Phase.COMPENSATE,
            complete_by=now - timedelta(seconds=1),
            created_at=now,
            updated_at=now,
        ),
        steps=[StepState(index=0, name="a", status=StepStatus.FAILED, attempts=1, failures=1)],
        input={},
        input_hash="h",
    )
    decision = transitions.recover_expired(record, Context(workflow, EngineSettings(), now), {})
    assert decision.outcome is Outcome.KICKED
    assert record.steps[0].failures == 1
    assert record.state.failure_count == 0
    [message] = decision.messages
    assert isinstance(message.body, SchedulerCommand)
    assert message.body.kind is CommandKind.RESUME


# Finding 10's seed (docs/simulation.md), run as found (regressions.run_as_found) in the regressions' batch.
FINDING_10_SEED = 5194


@dataclass(frozen=True)
class Runs:
    """The module's runs: each regression's seed with its bug fixed and put back, by (name, put back), and
    finding 10's seed."""

    regressions: dict[tuple[str, bool], Result]
    finding_10: Result


# The store's fixes are in adapters.table_store too, where tests/adapters/test_store_races.py builds each
# bug's interleaving on Azurite.
@pytest.fixture(scope="module")
def regression_runs() -> Runs:
    """Every run of the module, on every core. With the bug back, a run ends at its first violation (what
    follows is not read); where that one is not the bug's symptom, the whole run is made again."""

    def job(seed: int, catalog: str, bug: str | None = None, first_violation: bool = False) -> Job:
        return Job(
            seed,
            bug=("regression", bug) if bug is not None else None,
            servicebus=False,
            catalog=catalog,
            submit_as_app=False,  # as the seeds were found (regressions.run_as_found)
            first_violation=first_violation,
        )

    keys = [(r, back) for r in REGRESSIONS for back in (False, True)]
    jobs = [job(r.seed, r.catalog, r.name if back else None, first_violation=back) for r, back in keys]
    *found, finding_10 = run_all([*jobs, job(FINDING_10_SEED, "engine-only")])
    runs = dict(zip(keys, found, strict=True))
    again = [r for r in REGRESSIONS if not r.shown_by(runs[r, True])]
    whole = run_all(job(r.seed, r.catalog, r.name) for r in again)
    runs |= {(r, True): result for r, result in zip(again, whole, strict=True)}
    return Runs({(r.name, back): result for (r, back), result in runs.items()}, finding_10)


@pytest.mark.parametrize("regression", REGRESSIONS, ids=lambda r: f"{r.name}-{r.seed}")
def test_the_seed_passes_and_fails_again_with_the_bug_put_back(
    regression: Regression, regression_runs: Runs
) -> None:
    fixed = regression_runs.regressions[regression.name, False]
    assert fixed.ok, fixed.report()
    assert regression.shown_by(regression_runs.regressions[regression.name, True]), (
        f"seed {regression.seed} no longer shows {regression.name}: hunt another "
        f"(python -m tests.simulation.regressions {regression.name})"
    )


def test_a_submission_whose_own_watch_entry_was_swept_before_its_write_stays_watched(
    regression_runs: Runs,
) -> None:
    """Finding 10 (docs/simulation.md): the submission puts its entry again when its write came so late
    that the entry may have been swept (adapters.table_store.create; on Azurite:
    tests/adapters/test_store_races.py)."""
    result = regression_runs.finding_10
    assert not any("never moved to the history" in what for _, what in result.violations), result.report()
