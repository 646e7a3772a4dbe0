"""Four bugs to plant in the engine, each one a line or two away from the real code: the simulation's
fixed seeds must catch every one of them (tests/simulation/test_planted_bugs.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from engine import transitions
from engine.breaker import BreakerRecord
from engine.decisions import REFUSED, Decision, Outcome
from engine.machine import Operation
from engine.messages import AgentReply
from engine.scheduler import Scheduler
from engine.state import TaskRecord
from engine.transitions import Context


def apply_reply_without_attempt_fence(record: TaskRecord, ctx: Context, reply: AgentReply) -> Decision:
    """``transitions.apply_reply`` that checks the step but not the attempt."""
    if record.state.current_step != reply.step_index:
        return REFUSED
    operation = transitions.reply_operation(reply)
    if transitions.allows(operation, record) is None:
        return REFUSED
    if operation is Operation.STEP_SUCCEEDED:
        return transitions._step_succeeded(record, ctx, reply.result)
    if operation is Operation.STEP_FAILED:
        return transitions._step_failed(record, ctx, reply.error or "step failed")
    if operation is Operation.COMPENSATION_SUCCEEDED:
        return transitions._compensation_succeeded(record, ctx)
    return transitions._compensation_failed(record, ctx, reply.error or "compensation failed")


async def _commit_without_etags(
    self: Scheduler, record: TaskRecord, decision: Decision, *, copy: bool = False
) -> bool:
    """``Scheduler._commit`` that overwrites whatever is stored: it takes the stored ETags before saving."""
    stored = await self.parts.store.load(record.order_id)
    if stored is not None and not stored.archived:
        record.etags = dict(stored.etags)
        record.listed = stored.listed
    return await _original_commit(self, record, decision, copy=copy)


_original_commit = Scheduler._commit
_original_dispatch_compensation = transitions._dispatch_compensation
_original_recover_expired = transitions.recover_expired


def dispatch_compensation_forward(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """``transitions._dispatch_compensation`` that undoes the lowest step first."""
    index = next(
        (
            i
            for i in range(len(record.steps))
            if record.steps[i].status in transitions._MAY_HAVE_EFFECT and ctx.steps[i].compensation
        ),
        None,
    )
    if index is None:
        return _original_dispatch_compensation(record, ctx, -1)
    return transitions._dispatch(record, ctx, index, compensating=True)


def recover_expired_counting_holds(
    record: TaskRecord, ctx: Context, breakers: Mapping[str, BreakerRecord] | None = None
) -> Decision:
    """``transitions.recover_expired`` that also counts a failure when it holds a task for a breaker."""
    decision = _original_recover_expired(record, ctx, breakers)
    if decision.outcome is not Outcome.HELD:
        return decision
    step = record.steps[record.state.current_step]
    step.failures += 1
    record.state.failure_count += 1
    if step.failures >= ctx.settings.supervisor_max_failures:
        return transitions._enter_error(record, ctx, f"{step.failures} failures: held", "supervisor")
    return decision


PLANTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "reply accepted without its attempt's fence": lambda mp: mp.setattr(
        transitions, "apply_reply", apply_reply_without_attempt_fence
    ),
    "the Scheduler saves without the ETag condition": lambda mp: mp.setattr(
        Scheduler, "_commit", _commit_without_etags
    ),
    "compensation in forward order": lambda mp: mp.setattr(
        transitions, "_dispatch_compensation", dispatch_compensation_forward
    ),
    "a breaker hold counted as a failure": lambda mp: mp.setattr(
        transitions, "recover_expired", recover_expired_counting_holds
    ),
}
