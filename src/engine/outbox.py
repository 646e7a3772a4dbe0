"""Sending what a saved state change decided, and raising the alerts it asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from . import queues, saved_task, telemetry
from .decisions import Alert, Decision, Outgoing
from .ports import MessageSender
from .state import TaskRecord


async def _send_in_order(sender: MessageSender, messages: list[Outgoing]) -> None:
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


async def deliver(sender: MessageSender, messages: Iterable[Outgoing], alerts: Iterable[Alert] = ()) -> None:
    """Send the messages, then emit the alert events. Call only after the state is saved.

    Messages to one queue go in the order given; different queues are sent to at the same time, so a
    step's request does not wait for the status message decided with it, and the status queue's sends
    start last, so they do not get in ahead of the work's next message on the way out either. Raises
    the first failure once every send has ended (a message that was sent stays sent: the next
    transition or the Supervisor makes up for one that was not, as after a crash between two sends).
    """
    by_queue: dict[str, list[Outgoing]] = {}
    for message in messages:
        by_queue.setdefault(message.queue, []).append(message)
    if queues.STATUS_QUEUE in by_queue:
        # The work's next message starts first; a status message only reports the move to the application.
        by_queue[queues.STATUS_QUEUE] = by_queue.pop(queues.STATUS_QUEUE)
    if len(by_queue) == 1:
        [only] = by_queue.values()
        await _send_in_order(sender, only)
    elif by_queue:
        outcomes = await asyncio.gather(
            *(_send_in_order(sender, queued) for queued in by_queue.values()), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
    for alert in alerts:
        telemetry.emit_event(alert.name, **alert.fields())


async def carry_out(sender: MessageSender, decision: Decision, saved: TaskRecord) -> None:
    """Send a saved decision's messages and raise its alerts.

    ``saved`` is the task as the change left it in the store: the messages to the Scheduler and the
    Agents carry it (see :mod:`engine.saved_task`), so the next step need not read it back.
    """
    await deliver(sender, saved_task.attach(decision.messages, saved), decision.alerts)
