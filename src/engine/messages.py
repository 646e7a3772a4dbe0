"""Messages between the Scheduler, the Agents, the Supervisor and the submitting application."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import formats
from .calls import AgentCall

# The largest copy of a saved task a message carries (see engine.saved_task); a larger task is read back.
# Service Bus Standard takes 256 KB per message, and the copy goes beside the message's own payload.
SAVED_TASK_MAX_CHARS = 32_000
_SAVED_TASK = (
    "the task as the sender saved it, opaque (see engine.saved_task): the Scheduler applies the message "
    "to it instead of reading the task; a copy gone stale fails the save's ETag check"
)


def _absent(value: object) -> bool:
    """Messages without a saved copy leave the field out rather than send null."""
    return value is None


def _first_format(value: int) -> bool:
    """Format 1 (release 1.0.0's, whose readers refuse a field they do not know) is written as no field."""
    return value == 1


class _Message(BaseModel):
    # Fields a later release adds are ignored, not refused (engine.formats).
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    format: int = Field(
        default=formats.MESSAGES_WRITTEN,
        ge=1,
        description="the format it was written in (engine.formats); absent: 1",
        exclude_if=_first_format,
    )


class CommandKind(StrEnum):
    """Why the Scheduler is asked to look at a task."""

    START = "start"  # a new task, or one the Supervisor reset to Pending
    RESUME = "resume"  # continue whatever the task is doing (compensation retries, cancel)
    WAKE = "wake"  # a timer's time has come (scheduled for it); fenced by step and attempt
    RETRY = "retry"  # dispatch one step of a group again (its retry's time has come); fenced likewise


class SchedulerCommand(_Message):
    """On the Scheduler's queue: look at this task and move it on."""

    order_id: str = Field(alias="orderId", min_length=1, max_length=64)
    kind: CommandKind
    reason: str = Field(default="", max_length=200)
    # A wake-up names the wait it ends, so one for an earlier wait (or a wait ended by hand) changes nothing.
    step_index: int | None = Field(default=None, alias="stepIndex", ge=0, exclude_if=_absent)
    attempt: int | None = Field(default=None, ge=1, exclude_if=_absent)
    saved_task: str | None = Field(
        default=None,
        alias="savedTask",
        max_length=SAVED_TASK_MAX_CHARS,
        description=_SAVED_TASK,
        exclude_if=_absent,
    )


class AgentRequest(_Message):
    """On an agent's queue: run one action of one step, before ``complete_by``."""

    order_id: str = Field(alias="orderId")
    # The workflow version the task runs (None from a sender that predates versions): picks the step's
    # retry policy.
    workflow: str | None = None
    workflow_version: int | None = Field(default=None, alias="workflowVersion", ge=1)
    step: str
    step_index: int = Field(alias="stepIndex", ge=0)
    attempt: int = Field(ge=1)
    compensating: bool = False
    action: str
    idempotency_key: str = Field(
        alias="idempotencyKey", description="the same on every retry and re-dispatch"
    )
    complete_by: datetime = Field(alias="completeBy")
    payload: dict[str, Any] = Field(default_factory=dict)

    saved_task: str | None = Field(
        default=None,
        alias="savedTask",
        max_length=SAVED_TASK_MAX_CHARS,
        description=f"{_SAVED_TASK}; an Agent returns it unchanged in its reply",
        exclude_if=_absent,
    )


def request_message_id(order_id: str, step_index: int, compensating: bool, attempt: int) -> str:
    """The message id of one dispatch of a step: the same dispatch sent twice is one message to the
    broker's duplicate detection, and a re-dispatch (a new attempt) is a new one."""
    phase = "c" if compensating else "f"
    return f"{order_id}:{step_index}:{phase}:{attempt}"


def reply_message_id(request: AgentRequest) -> str:
    """The message id of the reply to ``request``."""
    dispatch = request_message_id(request.order_id, request.step_index, request.compensating, request.attempt)
    return f"{dispatch}:reply"


class ReplyOutcome(StrEnum):
    """What an Agent reports. A timeout is never reported: the Agent stays silent."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # a lasting (nontransient) fault
    # The service took the call (202 Accepted) and sends its outcome to the callback route later.
    ACCEPTED = "accepted"


class AgentReply(_Message):
    """On the Scheduler's reply queue: the outcome of one attempt, fenced by step and attempt."""

    order_id: str = Field(alias="orderId")
    step_index: int = Field(alias="stepIndex", ge=0)
    attempt: int = Field(ge=1)
    compensating: bool = False
    outcome: ReplyOutcome
    result: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    saved_task: str | None = Field(
        default=None,
        alias="savedTask",
        max_length=SAVED_TASK_MAX_CHARS,
        description="the request's savedTask, unchanged",
        exclude_if=_absent,
    )
    call: AgentCall | None = Field(
        default=None, description="what the Agent sent and saw, for the step's record", exclude_if=_absent
    )


class StatusEvent(StrEnum):
    """Status changes the Scheduler publishes for the submitting application."""

    RECEIVED = "received"
    STEP_COMPLETED = "step-completed"
    WAITING = "waiting"  # a step waits for a time or a person (detail: what for, until when)
    PROCESSED = "processed"
    COMPENSATING = "compensating"
    STEP_COMPENSATED = "step-compensated"
    COMPENSATED = "compensated"
    ERROR = "error"


class StatusMessage(_Message):
    """On the status queue, with the order id as correlation id."""

    order_id: str = Field(alias="orderId")
    event: StatusEvent
    process_state: str = Field(alias="processState")
    step: str | None = None
    detail: str | None = None
    at: datetime


def callback_context(request: AgentRequest) -> str:
    """What a service that answers later sends back with its outcome: the dispatch it answers (order,
    step, phase, attempt), so that the outcome is applied to that dispatch only."""
    return request_message_id(request.order_id, request.step_index, request.compensating, request.attempt)


def parse_callback_context(context: str) -> tuple[str, int, bool, int] | None:
    """(order id, step index, compensating, attempt) of a callback context, or None if it is not one."""
    order_id, _, rest = context.rpartition(":")
    order_id, _, phase = order_id.rpartition(":")
    order_id, _, index = order_id.rpartition(":")
    if not order_id or phase not in ("f", "c") or not index.isdigit() or not rest.isdigit():
        return None
    if int(rest) < 1 or len(order_id) > 64:
        return None
    return order_id, int(index), phase == "c", int(rest)
