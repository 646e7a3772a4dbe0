"""What a transition decided: the messages to send once the change is saved, the alerts to raise, and
what kind of move it was. Callers need no side channels to learn what happened. A command to the Scheduler,
which many moves send (and a kind of wait: a timer's wake-up), is made here (:func:`command`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel

from . import queues, telemetry
from .messages import CommandKind, SchedulerCommand


@dataclass(frozen=True)
class Outgoing:
    """A message to send once the state change that decided it is saved."""

    queue: str
    body: BaseModel
    message_id: str
    correlation_id: str
    reply_to: str | None = None
    time_to_live_seconds: float | None = None
    scheduled_at: datetime | None = None


@dataclass(frozen=True)
class OrderEnteredError:
    """Alert: a task entered Error and waits for an operator."""

    name: ClassVar[str] = telemetry.ORDER_ENTERED_ERROR

    order_id: str
    failure_count: int
    phase: str
    step: str
    reason: str

    def fields(self) -> dict[str, Any]:
        """The event's properties, as the alert rules and dashboards read them."""
        return {
            "orderId": self.order_id,
            "failureCount": self.failure_count,
            "phase": self.phase,
            "step": self.step,
            "reason": self.reason,
        }


Alert = OrderEnteredError


class Outcome(StrEnum):
    """What kind of move a transition made."""

    REFUSED = "refused"  # the state machine does not allow it now: nothing changed, nothing to send
    UNCHANGED = "unchanged"  # allowed, and already under way: nothing changed, nothing to send
    MOVED = "moved"  # the task moved on
    KICKED = "kicked"  # the Supervisor re-sent a lost kick
    RETRIED = "retried"  # the Supervisor counted a failure and gave the task back
    ERRORED = "errored"  # the task entered Error (with an alert)
    HELD = "held"  # the Supervisor left the task alone while its service's breaker is open
    RELEASED = "released"  # the Supervisor gave the task back without counting a failure
    DEADLINE = "deadline"  # the Supervisor applied a waiting approval's policy after its deadline (undo)


@dataclass(frozen=True)
class Decision:
    """The result of one transition."""

    outcome: Outcome
    messages: tuple[Outgoing, ...] = ()
    alerts: tuple[Alert, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the record was changed and must be saved (then the messages sent)."""
        return self.outcome not in (Outcome.REFUSED, Outcome.UNCHANGED)

    def after(self, *first: Outgoing) -> Decision:
        """The same decision with ``first`` sent before its own messages."""
        return Decision(self.outcome, (*first, *self.messages), self.alerts)


REFUSED = Decision(Outcome.REFUSED)
UNCHANGED = Decision(Outcome.UNCHANGED)


def random_id() -> str:
    """A fresh random id: where the unique part of a command's message id comes from by default."""
    return uuid.uuid4().hex


def command(
    order_id: str,
    kind: CommandKind,
    reason: str,
    at: datetime | None = None,
    new_id: Callable[[], str] = random_id,
    dispatch: tuple[int, int] | None = None,
) -> Outgoing:
    """A message asking the Scheduler to look at a task (now, or at ``at``); ``dispatch`` (step index,
    attempt) names the one wait a wake-up is for."""
    step_index, attempt = dispatch if dispatch is not None else (None, None)
    named = f"{step_index}:{attempt}:" if dispatch is not None else ""
    return Outgoing(
        queue=queues.SCHEDULER_QUEUE,
        body=SchedulerCommand(
            order_id=order_id, kind=kind, reason=reason, step_index=step_index, attempt=attempt
        ),
        message_id=f"{order_id}:{kind.value}:{named}{new_id()}",
        correlation_id=order_id,
        scheduled_at=at,
    )
