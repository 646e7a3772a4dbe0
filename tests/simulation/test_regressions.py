"""The bugs the simulation found, kept as tests of the engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine import transitions
from engine.decisions import Outcome
from engine.messages import CommandKind, SchedulerCommand
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, WorkflowDefinition

# ---- in the engine ------------------------------------------------------------------------------------


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
