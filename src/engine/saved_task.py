"""The task as it was saved, carried in the messages sent about it, so the Scheduler need not read it back.

Whoever saves a task and then sends the Scheduler a command, or an Agent a request, puts the saved task
in the message (``savedTask``); an Agent returns it unchanged in its reply. The Scheduler applies the
message to that copy and saves the result with the copy's ETags. The copy needs no trust in its age:
if anyone changed the task since (a Supervisor, an operator, a duplicate message applied first), the
ETag check fails the save, and the Scheduler reads the task and decides again, exactly as without a
copy. So a step costs one table request (the conditional save) instead of two (a read, then the save).

The copy is opaque text: a checksum, then the record's JSON. A copy that does not check out (edited,
cut, for another order, or from another version of this module) is ignored, as is a task too large to
copy (the message would grow by its whole input): the Scheduler then reads the task.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .decisions import Outgoing
from .messages import SAVED_TASK_MAX_CHARS, AgentRequest, SchedulerCommand
from .state import StepState, TaskRecord, TaskState

log = logging.getLogger("engine.saved_task")

# Changes when the layout below changes, so an old copy is ignored rather than misread (2: ``listed``; a
# copy without it would save the task without moving its listing entry; 3: steps' ``Calls``, which a copy
# without them would save away).
_FORMAT = "3"
_SEPARATOR = ":"


class _Copy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: TaskState
    steps: list[StepState]
    input: dict[str, Any]
    input_hash: str = Field(alias="inputHash")
    etags: dict[str, str]
    indexed: bool
    listed: str | None


def _checksum(body: str) -> str:
    return hashlib.blake2b(body.encode("utf-8"), digest_size=12).hexdigest()


def encode(record: TaskRecord) -> str | None:
    """The saved ``record`` as text for a message, or None if it is too large to carry.

    Call only with a record as the store holds it (just loaded, created or saved): its ETags are what
    make a later save from the copy conditional on nothing having changed.
    """
    if record.pending_audit() or record.changed_steps():
        raise ValueError(f"task {record.order_id} has unsaved changes; only a saved task can be copied")
    if record.archived:
        return None  # finished and in the history: nothing will save it again
    if record.kept:
        return None  # it holds a later release's properties, which the copy does not carry: read it
    body = _Copy(
        state=record.state,
        steps=record.steps,
        input=record.input,
        inputHash=record.input_hash,
        etags=record.etags,
        indexed=record.indexed,
        listed=record.listed,
    ).model_dump_json(by_alias=True)
    text = f"{_FORMAT}{_SEPARATOR}{_checksum(body)}{_SEPARATOR}{body}"
    return text if len(text) <= SAVED_TASK_MAX_CHARS else None


def decode(text: str | None, order_id: str) -> TaskRecord | None:
    """The task ``text`` holds, if it checks out and is ``order_id``'s; otherwise None (read the task)."""
    if not text:
        return None
    version, _, rest = text.partition(_SEPARATOR)
    checksum, _, body = rest.partition(_SEPARATOR)
    if version != _FORMAT or not body or _checksum(body) != checksum:
        log.warning("a saved copy of task %s did not check out; the task is read instead", order_id)
        return None
    try:
        copy = _Copy.model_validate_json(body)
    except ValidationError:
        log.warning("a saved copy of task %s could not be read; the task is read instead", order_id)
        return None
    if copy.state.order_id != order_id:
        other = copy.state.order_id
        log.warning("a message about task %s carried a copy of task %s; ignored", order_id, other)
        return None
    return TaskRecord(
        state=copy.state,
        steps=copy.steps,
        input=copy.input,
        input_hash=copy.input_hash,
        etags=copy.etags,
        indexed=copy.indexed,
        listed=copy.listed,
    )


def attach(messages: tuple[Outgoing, ...] | list[Outgoing], record: TaskRecord) -> list[Outgoing]:
    """``messages`` with the saved ``record`` in those that go to the Scheduler or an Agent about it.

    Status messages (for the application) are left as they are. A task too large to copy is sent
    without one, and its messages unchanged.
    """

    def about_record(message: Outgoing) -> bool:
        body = message.body
        return isinstance(body, SchedulerCommand | AgentRequest) and body.order_id == record.order_id

    if not any(about_record(m) for m in messages):
        return list(messages)
    text = encode(record)
    if text is None:
        return list(messages)
    return [
        replace(m, body=m.body.model_copy(update={"saved_task": text})) if about_record(m) else m
        for m in messages
    ]
