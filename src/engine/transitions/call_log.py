"""The steps' call records (:mod:`engine.calls`) as the moves keep them: a dispatch, its end, a timeout the
Supervisor found, a reply applied."""

from __future__ import annotations

from .. import calls
from ..messages import (
    AgentReply,
)
from ..state import TaskRecord
from .context import (
    Context,
)


def _log_dispatch(record: TaskRecord, ctx: Context, index: int, kind: calls.Kind) -> None:
    """Record a new dispatch of step ``index`` (its attempt and CompleteBy as just set)."""
    step = record.steps[index]
    attempt = step.compensation_attempts if kind == "undo" else step.attempts
    entry = calls.CallEntry(attempt=attempt, kind=kind, dispatched=ctx.now, complete_by=step.complete_by)
    step.calls = calls.appended(step.calls, entry)


def _current_entry(record: TaskRecord, index: int) -> calls.CallEntry | None:
    """The record of step ``index``'s dispatch under way (its latest), if kept."""
    entries = record.steps[index].calls
    return entries[-1] if entries else None


def _log_end(record: TaskRecord, ctx: Context, index: int, outcome: str, reason: str | None = None) -> None:
    """The dispatch under way of step ``index`` ended (a wait over, a step given up on)."""
    entry = _current_entry(record, index)
    if entry is not None and entry.outcome is None:
        entry.outcome, entry.ended = outcome, ctx.now
        if reason:
            entry.reason = reason[:1000]


def _log_timeout(record: TaskRecord, ctx: Context, index: int, recovery: str) -> None:
    """The Supervisor found step ``index``'s dispatch past its CompleteBy, and did ``recovery``."""
    entry = _current_entry(record, index)
    if entry is None:
        return
    if entry.outcome is None or entry.outcome == "accepted":
        entry.outcome, entry.ended = "timed out", ctx.now
    entry.recovery = recovery[:300]


def _log_reply(record: TaskRecord, ctx: Context, reply: AgentReply) -> None:
    """What an applied reply (or callback) says about its dispatch."""
    kind: calls.Kind = "undo" if reply.compensating else "call"
    entry = calls.entry_for(record.steps[reply.step_index].calls, reply.attempt, kind)
    if entry is None:
        return
    call = reply.call
    if call is not None and call.callback:
        entry.answered = entry.ended = ctx.now
    elif call is not None:
        entry.instance, entry.started, entry.tries = call.instance or None, call.started, call.tries
        entry.status, entry.body, entry.ended = call.status, call.body, call.ended
    else:
        entry.ended = ctx.now
    entry.outcome = reply.outcome.value
    entry.result = reply.result or None
    entry.reason = (reply.error or "")[:1000] or None
