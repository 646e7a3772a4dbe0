"""Sending what a saved state change decided, and raising the alerts it asked for."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from . import queues, saved_task, telemetry
from .decisions import Alert, Decision, Outgoing
from .errors import ConcurrencyError
from .ports import MessageSender, StateStore
from .state import TaskRecord

log = logging.getLogger("engine.outbox")


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
    for queue in [q for q in by_queue if queues.is_status_queue(q)]:
        # The work's next message starts first; a status message only reports the move to the application.
        by_queue[queue] = by_queue.pop(queue)
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


async def carry_out(sender: MessageSender, decision: Decision, saved: TaskRecord, store: StateStore) -> None:
    """Send a saved decision's messages and raise its alerts.

    ``saved`` is the task as the change left it in the store: the messages to the Scheduler and the
    Agents carry it (see :mod:`engine.saved_task`), so the next step need not read it back. Once the
    alert of a move into Error is raised, the task says so (see :func:`alert_raised`).
    """
    await deliver(sender, saved_task.attach(decision.messages, saved), decision.alerts)
    if decision.alerts:
        await alert_raised(store, saved)


async def alert_raised(store: StateStore, record: TaskRecord) -> bool:
    """Clear the task's AlertPending now that its Error alert is raised; True if the store took it.

    Alerting is at least once: until this write lands, the Supervisor raises the alert again when it
    comes to the task. The write is conditional on the task's ETag: a task that changed meanwhile (an
    operator took it out of Error, or another process cleared it first) owes nothing more from here.
    """
    if not record.state.alert_pending:
        return True
    record.state.alert_pending = False
    try:
        await store.save(record)
    except ConcurrencyError:
        return False
    except Exception:
        log.warning("could not record the alert of order %s as raised", record.order_id, exc_info=True)
        return False
    return True
