"""Sending what a saved state change decided, and raising the alerts it asked for."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import telemetry
from .ports import MessageSender
from .transitions import Outgoing


def deliver(
    sender: MessageSender, messages: Iterable[Outgoing], alerts: Iterable[dict[str, Any]] = ()
) -> None:
    """Send each message in order, then emit the alert events. Call only after the state is saved."""
    for message in messages:
        sender.send(
            message.queue,
            message.body,
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            reply_to=message.reply_to,
            time_to_live_seconds=message.time_to_live_seconds,
            scheduled_at=message.scheduled_at,
        )
    for alert in alerts:
        fields = dict(alert)
        telemetry.emit_event(fields.pop("name"), **fields)
