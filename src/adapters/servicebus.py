"""The engine's message sender on Service Bus: the asynchronous SDK, one client per process (and event
loop), one sender per queue, concurrent sends to a queue coalesced into batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessageSizeExceededError
from pydantic import BaseModel

from engine import tracing

log = logging.getLogger("adapters.servicebus")


def client_from_settings(
    settings: dict[str, str], connection: str = "ServiceBusConnection"
) -> ServiceBusClient:
    """An asynchronous client from app settings, the way the Functions host reads the same connection.

    Locally ``<connection>`` holds a connection string. In Azure it is identity-based:
    ``<connection>__fullyQualifiedNamespace`` and, for a user-assigned identity, ``<connection>__clientId``.
    The client connects on first use, on the event loop that uses it.
    """
    if settings.get(connection):
        return ServiceBusClient.from_connection_string(settings[connection])
    namespace = settings.get(f"{connection}__fullyQualifiedNamespace")
    if not namespace:
        raise RuntimeError(f"set {connection} (connection string) or {connection}__fullyQualifiedNamespace")
    from azure.identity.aio import DefaultAzureCredential  # only needed in Azure

    credential = DefaultAzureCredential(managed_identity_client_id=settings.get(f"{connection}__clientId"))
    return ServiceBusClient(namespace, credential)


@dataclass(eq=False)
class _Waiting:
    """A message handed to :meth:`ServiceBusSender.send`, and the future its caller waits on."""

    message: ServiceBusMessage
    sent: asyncio.Future[None]


@dataclass(eq=False)
class _QueueSender:
    """One queue's SDK sender, the lock that makes its requests take turns, and the sends waiting."""

    sender: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: list[_Waiting] = field(default_factory=list)
    flushing: bool = False


class ServiceBusSender:
    """Sends JSON messages from coroutines of one event loop.

    An SDK sender's links are not safe for overlapping requests (scheduling uses its management link), so
    each queue's requests take turns behind an ``asyncio.Lock``. Sends that arrive while a request to the
    same queue is under way are not queued one round trip each: they wait together and go in the next
    request as one batch (a lone send goes as soon as the link is free, as before). A batch is accepted or
    refused as a whole, so each caller's ``send`` returns once its own message is on the queue and raises
    if it is not. ``counts`` holds the operations sent per queue (``send``, ``schedule``), one per message,
    counted once the SDK has returned: the figures a capacity estimate needs.
    """

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self.counts: dict[str, dict[str, int]] = {}
        self._queues: dict[str, _QueueSender] = {}
        self._flushers: set[asyncio.Task[None]] = set()

    def _queue(self, queue: str) -> _QueueSender:
        # No await between the check and the insert: coroutines cannot interleave here.
        if queue not in self._queues:
            self._queues[queue] = _QueueSender(self._client.get_queue_sender(queue))
            self.counts[queue] = {}
        return self._queues[queue]

    def _count(self, queue: str, operation: str, n: int) -> None:
        per_queue = self.counts[queue]
        per_queue[operation] = per_queue.get(operation, 0) + n

    async def send(
        self,
        queue: str,
        body: BaseModel,
        *,
        message_id: str,
        correlation_id: str,
        reply_to: str | None = None,
        time_to_live_seconds: float | None = None,
        scheduled_at: datetime | None = None,
    ) -> None:
        """Send (or schedule, when ``scheduled_at`` is given) one message; raises if it was not sent.

        The message carries the span context it is sent from (``traceparent``), for whoever handles it.
        """
        traceparent = tracing.traceparent()
        message = ServiceBusMessage(
            body.model_dump_json(by_alias=True),
            content_type="application/json",
            message_id=message_id,
            correlation_id=correlation_id,
            reply_to=reply_to,
            subject=type(body).__name__,
            application_properties={tracing.TRACEPARENT: traceparent} if traceparent else None,
        )
        if time_to_live_seconds is not None:
            message.time_to_live = timedelta(seconds=time_to_live_seconds)
        target = self._queue(queue)
        if scheduled_at is not None:
            async with target.lock:
                await target.sender.schedule_messages(message, scheduled_at)
                self._count(queue, "schedule", 1)
            return
        waiting = _Waiting(message, asyncio.get_running_loop().create_future())
        target.waiting.append(waiting)
        if not target.flushing:
            target.flushing = True
            flusher = asyncio.create_task(self._flush(queue, target))
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        await waiting.sent

    async def _flush(self, queue: str, target: _QueueSender) -> None:
        """Send what is waiting for ``queue``, a request at a time, until nothing is left."""
        taken: list[_Waiting] = []
        try:
            async with target.lock:
                while target.waiting:
                    # A caller cancelled before its message went out has given up on it: leave it out.
                    taken = [w for w in target.waiting if not w.sent.done()]
                    target.waiting = []
                    try:
                        groups = await self._groups(target.sender, taken)
                    except Exception as exc:  # the link cannot be opened: nothing of this round was sent
                        for w in taken:
                            _fail(w, exc)
                        continue
                    for batch, group in groups:
                        await self._send_group(queue, target.sender, batch, group)
        except BaseException as exc:  # cancelled (the loop is closing): nobody may wait for ever
            for w in [*taken, *target.waiting]:
                _fail(w, exc)
            raise
        finally:
            target.flushing = False  # no await since the loop found nothing waiting

    @staticmethod
    async def _groups(sender: Any, waiting: list[_Waiting]) -> list[tuple[Any, list[_Waiting]]]:
        """Split ``waiting`` into batches that fit the link, in order; a message too big for any batch
        gets a group of its own (and no batch), so that its own send reports why."""
        if len(waiting) <= 1:
            return [(None, waiting)] if waiting else []
        groups: list[tuple[Any, list[_Waiting]]] = []
        batch: Any = await sender.create_message_batch()
        group: list[_Waiting] = []
        for w in waiting:
            if _added(batch, w.message):
                group.append(w)
                continue
            if group:  # the batch is full: the message starts the next one
                groups.append((batch, group))
                batch, group = await sender.create_message_batch(), []
                if _added(batch, w.message):
                    group.append(w)
                    continue
            groups.append((None, [w]))
        if group:
            groups.append((batch, group))
        return groups

    async def _send_group(self, queue: str, sender: Any, batch: Any, group: list[_Waiting]) -> None:
        """One request: a lone message as itself, several as their batch; then answer their callers."""
        try:
            await sender.send_messages(group[0].message if batch is None or len(group) == 1 else batch)
        except Exception as exc:
            for w in group:
                _fail(w, exc)
            return
        self._count(queue, "send", len(group))
        for w in group:
            if not w.sent.done():
                w.sent.set_result(None)

    async def open(self, queues: Iterable[str]) -> None:
        """Open the senders of ``queues`` all at once, ahead of their first messages.

        The SDK opens a sender on its first send, and an open is a chain of handshakes (connection,
        session, authorisation, link) each followed by a fixed pause of the SDK's: about half a second.
        A fresh process that sends its first order on to four queues, one after the other, would pay
        that four times along the order's path. A send that comes while its queue's sender is opening
        waits for that open; a failed open is left to the first send, which opens (and retries) as
        before, so this never raises.
        """

        async def open_one(queue: str) -> None:
            target = self._queue(queue)
            async with target.lock:
                try:
                    await target.sender.__aenter__()  # the SDK's open, as `async with sender` does
                except Exception as exc:
                    # A fresh SDK sender for the first send, which opens it (with the SDK's retries)
                    # and reports what fails, exactly as if nothing had been tried ahead.
                    log.info("could not open the sender for %s ahead of use: %s", queue, exc)
                    with contextlib.suppress(Exception):
                        await target.sender.close()
                    target.sender = self._client.get_queue_sender(queue)

        await asyncio.gather(*(open_one(queue) for queue in dict.fromkeys(queues)))

    async def close(self) -> None:
        """Close every sender and the client."""
        if self._flushers:
            await asyncio.gather(*self._flushers, return_exceptions=True)
        queues = list(self._queues.values())
        self._queues.clear()
        for target in queues:
            await target.sender.close()
        await self._client.close()


def _fail(waiting: _Waiting, exc: BaseException) -> None:
    """Hand ``exc`` to the caller still waiting on a message that was not sent (cancel it if the sending
    was cancelled)."""
    if waiting.sent.done():
        return
    if isinstance(exc, Exception):
        waiting.sent.set_exception(exc)
    else:
        waiting.sent.cancel()


def _added(batch: Any, message: ServiceBusMessage) -> bool:
    """Add ``message`` to ``batch``; False if it does not fit."""
    try:
        batch.add_message(message)
    except MessageSizeExceededError:
        return False
    return True
