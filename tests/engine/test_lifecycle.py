"""The lifecycle rules the Supervisor's sweep carries out (engine.lifecycle), on records alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine.lifecycle import Expired, InTime, Settled, watched
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.waits import APPROVAL, CALLBACK

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = EngineSettings(step_complete_by_seconds=30, park_horizon_seconds=60)


def record(state: ProcessState, complete_by: datetime | None, **fields: object) -> TaskRecord:
    step = StepState(index=0, name="a", status=fields.pop("step_status", StepStatus.NOT_STARTED))  # type: ignore[arg-type]
    return TaskRecord(
        state=TaskState(
            order_id="o1",
            workflow="w",
            process_state=state,
            phase=Phase.FORWARD,
            complete_by=complete_by,
            created_at=NOW,
            updated_at=NOW - timedelta(seconds=10),
            **fields,
        ),
        steps=[step],
        input={},
        input_hash="h",
    )


def look(r: TaskRecord | None, clock: datetime = NOW) -> Settled | InTime | Expired:
    return watched(r, NOW, lambda: clock, SETTINGS)


def test_a_settled_order_is_archived_once_and_its_alert_left_to_its_process_for_a_step_s_budget() -> None:
    assert look(None) == Settled(archive=False, alert_owed_by=None)
    assert look(record(ProcessState.PROCESSED, None)) == Settled(archive=True, alert_owed_by=None)
    moved = record(ProcessState.PROCESSED, None)
    moved.archived = True
    assert look(moved) == Settled(archive=False, alert_owed_by=None)
    error = record(ProcessState.ERROR, None, alert_pending=True)
    assert look(error) == Settled(archive=False, alert_owed_by=NOW + timedelta(seconds=20))


def test_a_long_wait_parks_a_parked_order_due_soon_comes_back_and_a_callback_never_parks() -> None:
    far = NOW + timedelta(seconds=500)
    waiting = record(ProcessState.WAITING, far, waiting_for=APPROVAL, step_status=StepStatus.WAITING)
    assert look(waiting) == InTime(park=True, bring_back=False, until=far)
    # Judged at the clock's time: a sweep that ran long does not park what is due within two horizons.
    assert look(waiting, clock=far - timedelta(seconds=100)) == InTime(
        park=False, bring_back=False, until=far
    )
    waiting.parked = True
    assert look(waiting, clock=far - timedelta(seconds=100)) == InTime(park=False, bring_back=True, until=far)
    callback = record(ProcessState.WAITING, far, waiting_for=CALLBACK, step_status=StepStatus.WAITING)
    assert look(callback) == InTime(park=False, bring_back=False, until=far)


def test_an_expired_order_is_recovered_and_one_never_started_is_told_apart() -> None:
    assert look(record(ProcessState.PENDING, NOW - timedelta(seconds=1))) == Expired(never_started=True)
    running = record(
        ProcessState.PROCESSING, NOW - timedelta(seconds=1), attempt=1, step_status=StepStatus.RUNNING
    )
    assert look(running) == Expired(never_started=False)
