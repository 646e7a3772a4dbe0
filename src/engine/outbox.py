"""Sending what a saved state change decided, and raising the alerts it asked for."""

from __future__ import annotations

from collections.abc import Iterable

from . import telemetry
from .decisions import Alert, Decision, Outgoing
from .ports import MessageSender


async def deliver(sender: MessageSender, messages: Iterable[Outgoing], alerts: Iterable[Alert] = ()) -> None:
    """Send each message in order, then emit the alert events. Call only after the state is saved."""
    for message in messages:
        await sender.send(
            message.queue,
            message.body,
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            reply_to=message.reply_to,
            time_to_live_seconds=message.time_to_live_seconds,
            scheduled_at=message.scheduled_at,
        )
    for alert in alerts:
        telemetry.emit_event(alert.name, **alert.fields())


async def carry_out(sender: MessageSender, decision: Decision) -> None:
    """Send a saved decision's messages and raise its alerts."""
    await deliver(sender, decision.messages, decision.alerts)
