"""What the broker carried (replies, requests, commands, statuses, dead letters) and the alerts an operator
gets, as the other families read them; and the storefronts' status queues (the invariants' list:
:mod:`simulation.oracle`): each receives only its own orders' statuses, under the id its client gave."""

from __future__ import annotations

import logging
from typing import Any

from engine import queues
from engine.messages import AgentReply, AgentRequest, CommandKind, SchedulerCommand, StatusMessage
from engine.telemetry import ORDER_ENTERED_ERROR

from ..bus import Message
from ..loop import at_seconds
from .core import OracleCore


class Messages(OracleCore):
    """The broker's messages, as the oracle records them."""

    def sent(self, message: Message) -> None:
        body = message.body
        if isinstance(body, AgentReply):
            truth = self.orders.get(body.order_id)
            if truth is not None:
                truth.replies.add((body.step_index, body.compensating, body.attempt, body.outcome))
                self.note(
                    body.order_id,
                    "reply {} undo={} #{} {}",
                    body.step_index,
                    body.compensating,
                    body.attempt,
                    body.outcome.value,
                )
        elif isinstance(body, AgentRequest):
            truth = self.orders.get(body.order_id)
            if truth is not None:
                key = (body.step_index, body.compensating, body.attempt)
                truth.requests[key] = max(truth.requests.get(key, 0.0), at_seconds(body.complete_by))
            self.note(
                body.order_id,
                "request {} undo={} #{} until {}",
                body.step_index,
                body.compensating,
                body.attempt,
                body.complete_by,
            )
        elif isinstance(body, SchedulerCommand):
            truth = self.orders.get(body.order_id)
            if truth is not None:
                truth.commands_at = self.now()
            if body.kind is CommandKind.WAKE:
                reason = body.reason
                self.count(
                    "wake-ups re-sent by the Supervisor"
                    if reason.startswith("supervisor")
                    else "wake-ups that came early, scheduled again"
                    if "early" in reason
                    else "wake-ups scheduled"
                )
            self.note(body.order_id, "command {} {}", body.kind.value, body.reason)
        elif isinstance(body, bytes):
            self.poison_sent += 1
        else:
            self.status_messages += 1
            if isinstance(body, StatusMessage):
                self._status_sent(message, body)

    def _status_sent(self, message: Message, body: StatusMessage) -> None:
        """Each storefront's status queue receives only its own orders' statuses, under the id it gave (an
        order of no storefront's go to the shared queue). The order is the one the message's id names (the
        engine's duplicate-detection id starts with the task's id)."""
        order_id = message.message_id.split(":", 1)[0]
        truth = self.orders.get(order_id)
        if truth is None:
            self.violation(order_id, f"a status message of no order submitted, on {message.queue}")
            return
        queue = queues.status_queue(truth.storefront) if truth.storefront else queues.STATUS_QUEUE
        if message.queue != queue or body.order_id != truth.client_id:
            self.violation(
                order_id,
                f"a storefront's status queue receives only its own orders' statuses: {body.event.value} of "
                f"{order_id} went to {message.queue} as {body.order_id} (its own: {queue}, as "
                f"{truth.client_id})",
            )
            return
        truth.statuses.add(body.event.value)
        self.note(order_id, "status {} to {}", body.event.value, message.queue)

    def settled(self, message: Message) -> None:
        if message.state == "dead-lettered":
            key = f"{message.queue}: {message.reason}"
            self.dead_letters[key] = self.dead_letters.get(key, 0) + 1


class AlertHandler(logging.Handler):
    """Catches the engine's ``OrderEnteredError`` events (the alert an operator gets)."""

    def __init__(self, oracle: OracleCore) -> None:
        super().__init__(logging.ERROR)
        self.oracle = oracle

    def emit(self, record: logging.LogRecord) -> None:
        fields: Any = record.__dict__
        if fields.get("microsoft.custom_event.name") == ORDER_ENTERED_ERROR:
            self.oracle.alerted(str(fields.get("orderId")))
