"""What each dispatch of a step did, kept in the step's record: the calls shown to support staff.

A step's record keeps one :class:`CallEntry` per dispatch (an attempt of the step, of its undo, or of its
wait): when the Scheduler dispatched it and until when it could run; what the Agent sent and what came
back (the body as sent, with the fields its body model declares sensitive redacted before it left the
Agent's process), the tries, the timings and the process that made the call; how it ended (the answer,
the callback, the Supervisor finding it past its CompleteBy). They are saved with the step, so they move
with the order to the history, are parked with it and are purged with it, at no request of their own.

An Agent that gives up within complete-by sends nothing (another attempt may already run), so that
attempt's entry says only what the Scheduler and the Supervisor saw: dispatched, then timed out. A reply
the fence drops (a late attempt) is not recorded either: the step has moved on.

The action fills in what only it knows (the body, the HTTP status) through :func:`note_body` and
:func:`note_status`, which write to the Agent's note for the try under way (a context variable, so an
action that is not run by an Agent notes nothing).
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# How many dispatches a step's record keeps (the latest), and how large a body it keeps as sent: the
# step's record is one table entity, and the task travels in its messages (``engine.saved_task``).
MAX_ENTRIES = 10
MAX_BODY_CHARS = 2_000
REDACTED = "[redacted]"

Kind = Literal["call", "undo", "wait"]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, validate_assignment=True)


class AgentCall(_Camel):
    """What an Agent did for one request, carried on its reply: the body as sent (redacted), how many tries,
    the last answer's HTTP status or error, when it started and ended, and which process made it."""

    instance: str = ""
    started: datetime
    ended: datetime
    tries: int = Field(default=0, ge=0)
    status: int | None = None
    error: str | None = Field(default=None, max_length=1000)
    body: dict[str, Any] | None = None
    # The answer came to the callback route, not on the call (the call itself was answered 202).
    callback: bool = False


class CallEntry(_Camel):
    """One dispatch of a step, as its record keeps it."""

    attempt: int = Field(ge=0)
    kind: Kind = "call"
    dispatched: datetime
    complete_by: datetime | None = None
    instance: str | None = None
    body: dict[str, Any] | None = None
    started: datetime | None = None
    tries: int | None = None
    status: int | None = None
    # How it ended: succeeded, failed, accepted (answers later), timed out, held, due, approved, rejected,
    # expired; None while it runs.
    outcome: str | None = None
    result: dict[str, Any] | None = None
    reason: str | None = Field(default=None, max_length=1000)
    ended: datetime | None = None
    # When the callback of an accepted call came.
    answered: datetime | None = None
    # What the Supervisor did about it, when it found it past its CompleteBy.
    recovery: str | None = Field(default=None, max_length=300)


def bounded_body(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """``body`` as the record keeps it: whole, or, past :data:`MAX_BODY_CHARS` of JSON, only its size."""
    if body is None:
        return None
    text = json.dumps(body, separators=(",", ":"), default=str)
    return body if len(text) <= MAX_BODY_CHARS else {"truncated": True, "chars": len(text)}


def redacted(body: dict[str, Any], sensitive: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``body`` with the value of each field named in ``sensitive`` replaced by :data:`REDACTED` (absent and
    null values are left as they are: there is nothing to hide)."""
    return {k: (REDACTED if k in sensitive and v is not None else v) for k, v in body.items()}


def entry_for(entries: list[CallEntry], attempt: int, kind: Kind) -> CallEntry | None:
    """The entry of one dispatch (the latest of that attempt and kind), if the record still keeps it."""
    return next((e for e in reversed(entries) if e.attempt == attempt and e.kind == kind), None)


def appended(entries: list[CallEntry], entry: CallEntry) -> list[CallEntry]:
    """``entries`` with ``entry`` added, keeping the latest :data:`MAX_ENTRIES`."""
    return [*entries, entry][-MAX_ENTRIES:]


@dataclass
class Note:
    """What the action says about the try under way (see the module's docstring)."""

    body: dict[str, Any] | None = None
    status: int | None = None
    tries: int = 0
    error: str | None = None


_current: ContextVar[Note | None] = ContextVar("engine_calls_note", default=None)


def current_note() -> ContextVar[Note | None]:
    """The variable an Agent sets to a fresh :class:`Note` around the calls of one request."""
    return _current


def note_body(body: dict[str, Any]) -> None:
    """The body the action sends, already redacted (no-op outside an Agent)."""
    note = _current.get()
    if note is not None:
        note.body = bounded_body(body)


def note_status(status: int) -> None:
    """The HTTP status the service answered with (no-op outside an Agent)."""
    note = _current.get()
    if note is not None:
        note.status = status
