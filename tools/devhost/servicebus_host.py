"""Service Bus triggers: a PEEK_LOCK receiver per function, many messages in flight, settled as the host does.

Each message goes to ``azure-functions-runtime`` as the Functions host sends it: the body (a string when it
is UTF-8 text, else bytes) and the trigger metadata the Service Bus extension binds (MessageId,
DeliveryCount, EnqueuedTimeUtc, SequenceNumber, LockToken, CorrelationId, ContentType,
ApplicationProperties and UserProperties, ...), from which the runtime builds the function's
``func.ServiceBusMessage``. A message is completed when the function returns and abandoned when it
raises, so its delivery count rises and the queue's MaxDeliveryCount dead-letters a poison message.
Locks of messages in flight are renewed until ``maxAutoLockRenewalDuration``. A receiver whose
connection fails is closed and opened again with exponential backoff; the worker never stops because of
the broker.

One receive loop per function takes one message per call, and the receiver prefetches: the broker pushes
a window of messages per round trip, asked for only when the window fits the function's free
maxConcurrentCalls slots (see ``_Listener``). So, as in Azure, where the host keeps that many receive
calls open (with host.json's ``prefetchCount`` 0), a function never holds more than maxConcurrentCalls
messages, and none waits unrenewed in a buffer.

This uses the asyncio SDK. Its management link is not safe for concurrent requests (two lock renewals
at once can get the same delivery id and the broker drops the connection), so the SDK's AutoLockRenewer,
which renews each message in its own task, is not used: one task per receiver renews locks one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode, parse_connection_string
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType

from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec, resolve_setting_expressions
from devhost.host_config import HostSettings
from devhost.language_worker import InvocationFailed, LanguageWorker
from devhost.protos import function_rpc_pb2 as protos

log = logging.getLogger("devhost.servicebus")

# How long one receive call waits for a message; also how quickly a stop is noticed.
RECEIVE_WAIT_SECONDS = 1.0
# One message per receive call: after a first message the SDK waits a fixed 0.2 s to fill a batch, which
# would delay every message. The broker still pushes up to RECEIVE_CREDIT messages per round trip: the
# receiver prefetches (link credit = prefetch + 1) and each call takes the next one from its buffer at
# once. See _Listener for how that credit stays within the function's free maxConcurrentCalls slots.
RECEIVE_BATCH = 1
RECEIVE_CREDIT = 16
# The SDK holds its socket lock while it waits for a frame, delaying settlements by up to this long.
SOCKET_TIMEOUT_SECONDS = 0.05
BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
RENEW_CHECK_SECONDS = 0.5
# The receiver's private flag for waiting for the broker's outcome of a settlement (see _receiver).
AWAIT_SETTLEMENT_OUTCOME = "_await_settlement_outcome"
# Renew this long before the lock expires (or after half the lock duration, for short locks).
RENEW_MARGIN = timedelta(seconds=10)
CLOSE_TIMEOUT_SECONDS = 5.0


def connection_string_for(setting: str, environ: Mapping[str, str], function_name: str) -> str:
    """The connection string in the app setting the trigger's ``connection`` names.

    Like the host, falls back to ``AzureWebJobs<setting>``. Raises ConfigurationError if neither is set.
    """
    for name in (setting, f"AzureWebJobs{setting}"):
        value = environ.get(name, "").strip()
        if value:
            return value
    prefix = f"{setting}__".lower()
    if any(name.lower().startswith(prefix) for name in environ):
        raise ConfigurationError(
            f"function {function_name}: connection {setting!r} is configured as an identity-based connection "
            f"({setting}__fullyQualifiedNamespace), which the local worker does not support; "
            f"set {setting} to a connection string"
        )
    raise ConfigurationError(
        f"function {function_name}: the Service Bus connection app setting {setting!r} is not set; "
        f"set the environment variable {setting} to a connection string"
    )


def _text(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes | bytearray) else value


def _properties(message: ServiceBusReceivedMessage) -> dict[str, Any]:
    """Application properties with str keys, and str values where the SDK hands back bytes."""
    return {str(_text(key)): _text(value) for key, value in (message.application_properties or {}).items()}


def message_body(message: ServiceBusReceivedMessage) -> bytes:
    """The message body as bytes, whatever AMQP body section carried it."""
    body = message.body
    if message.body_type == AmqpMessageBodyType.DATA:
        return b"".join(bytes(part) for part in body)
    if message.body_type == AmqpMessageBodyType.VALUE:
        if isinstance(body, bytes | bytearray):
            return bytes(body)
        if isinstance(body, str):
            return body.encode("utf-8")
        return json.dumps(body, default=str).encode("utf-8")
    return json.dumps([_text(item) for item in body], default=str).encode("utf-8")


def _timespan(value: timedelta) -> str:
    """.NET TimeSpan text, as the host serialises one: ``[d.]hh:mm:ss[.fffffff]``."""
    seconds = int(value.total_seconds())
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    if value.microseconds:
        text += f".{value.microseconds:06d}0"
    return f"{days}.{text}" if days else text


def _typed(value: Any) -> protos.TypedData:
    """A metadata value as the host encodes it: text as a string, anything else (numbers too: the runtime
    reads no ``int`` TypedData in metadata) as JSON."""
    if isinstance(value, str):
        return protos.TypedData(string=value)
    if isinstance(value, datetime):
        return protos.TypedData(json=json.dumps(value.astimezone(UTC).isoformat()))
    if isinstance(value, timedelta):
        return protos.TypedData(json=json.dumps(_timespan(value)))
    return protos.TypedData(json=json.dumps(value, default=str))


def trigger_metadata(message: ServiceBusReceivedMessage) -> dict[str, protos.TypedData]:
    """The trigger metadata the host sends with a message (keys the message has no value for are left out)."""
    properties = _properties(message)
    state = message.state
    fields: dict[str, Any] = {
        "MessageId": _text(message.message_id),
        "DeliveryCount": message.delivery_count,
        "SequenceNumber": message.sequence_number,
        "EnqueuedSequenceNumber": message.enqueued_sequence_number,
        "EnqueuedTimeUtc": message.enqueued_time_utc,
        "ExpiresAtUtc": message.expires_at_utc,
        "LockedUntil": message.locked_until_utc,
        "LockToken": str(message.lock_token) if message.lock_token is not None else None,
        "ContentType": message.content_type,
        "CorrelationId": _text(message.correlation_id),
        "Label": message.subject,
        "Subject": message.subject,
        "ReplyTo": message.reply_to,
        "ReplyToSessionId": message.reply_to_session_id,
        "To": message.to,
        "SessionId": message.session_id,
        "PartitionKey": message.partition_key,
        "ScheduledEnqueueTimeUtc": message.scheduled_enqueue_time_utc,
        "TimeToLive": message.time_to_live,
        "DeadLetterSource": message.dead_letter_source,
        "DeadLetterReason": message.dead_letter_reason,
        "DeadLetterErrorDescription": message.dead_letter_error_description,
        "State": int(state) if state is not None else None,
        "ApplicationProperties": properties,
        "UserProperties": properties,
    }
    return {key: _typed(value) for key, value in fields.items() if value is not None}


def message_data(message: ServiceBusReceivedMessage) -> protos.TypedData:
    """The message body as the host binds it for the worker: a string when it is UTF-8 text, else bytes."""
    body = message_body(message)
    try:
        return protos.TypedData(string=body.decode("utf-8"))
    except UnicodeDecodeError:
        return protos.TypedData(bytes=body)


@dataclass(eq=False)
class _Delivery:
    """A message being processed, with what lock renewal needs."""

    message: ServiceBusReceivedMessage
    receiver: ServiceBusReceiver
    renew_until: datetime
    renew_margin: timedelta
    lock_lost: bool = False


@dataclass(eq=False)
class _Listener:
    """One function's receiver loop and the messages it has in flight.

    The receiver grants the broker ``credit`` messages at a time (its prefetch plus one), and grants the
    next window only once every message of the last one has arrived and been taken from its buffer.
    ``credited`` counts what the current window may still bring, so messages in flight plus messages the
    broker may push never exceed maxConcurrentCalls: a receive call that could grant a new window waits
    until ``credit`` slots are free. A prefetched message therefore always has a slot and is dispatched
    as soon as it arrives; its lock never runs out in the buffer, and the SDK releases what is still
    buffered when the receiver closes.
    """

    spec: FunctionSpec
    entity: str  # a queue name, or "topic/Subscriptions/subscription"
    topic: str | None
    subscription: str | None
    connection_string: str
    max_concurrency: int
    credited: int = 0
    deliveries: set[_Delivery] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    capacity: asyncio.Condition = field(default_factory=asyncio.Condition)
    connecting: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def credit(self) -> int:
        """Messages one receive window may bring: at most a quarter of the slots, so that the next window
        is asked for while three quarters of them are still busy (1, no prefetch, below 8 slots)."""
        return max(1, min(RECEIVE_CREDIT, self.max_concurrency // 4))

    def has_room(self) -> bool:
        """Whether a receive call cannot take the function past maxConcurrentCalls."""
        if self.credited > 0:  # the window's messages already have their slots
            return True
        return len(self.deliveries) + self.credit <= self.max_concurrency

    def received(self, count: int) -> None:
        """Account for a receive call that returned ``count`` messages."""
        if self.credit == 1:
            return  # no prefetch: the SDK grants one message per call and releases any that come late
        if self.credited == 0:  # the call found the window spent and granted a new one
            self.credited = self.credit
        self.credited = max(0, self.credited - count)


class ServiceBusHost:
    """Serves the app's Service Bus-triggered functions."""

    def __init__(
        self,
        specs: Sequence[FunctionSpec],
        settings: HostSettings,
        worker: LanguageWorker,
        environ: Mapping[str, str],
    ) -> None:
        self._worker = worker
        self._settings = settings
        self._clients: dict[str, ServiceBusClient] = {}
        self._stopping = asyncio.Event()
        self._deadline: float | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.listeners = [self._listener(spec, environ) for spec in specs]

    def _listener(self, spec: FunctionSpec, environ: Mapping[str, str]) -> _Listener:
        where = f"function {spec.name}"
        if spec.is_sessions_enabled:
            raise ConfigurationError(
                f"{where}: session-enabled Service Bus triggers are not supported locally"
            )
        if spec.cardinality != "one":
            raise ConfigurationError(
                f"{where}: batched Service Bus triggers (cardinality {spec.cardinality!r}) are not "
                "supported locally"
            )
        if not spec.connection:
            raise ConfigurationError(f"{where}: the Service Bus trigger sets no connection")
        connection = connection_string_for(spec.connection, environ, spec.name)
        try:
            parse_connection_string(connection)
        except ValueError as exc:
            raise ConfigurationError(
                f"{where}: app setting {spec.connection!r} is not a Service Bus connection string: {exc}"
            ) from exc
        if spec.queue_name:
            queue = resolve_setting_expressions(spec.queue_name, environ, f"{where}: queue_name")
            return _Listener(spec, queue, None, None, connection, self._settings.max_concurrent_calls)
        if spec.topic_name and spec.subscription_name:
            topic = resolve_setting_expressions(spec.topic_name, environ, f"{where}: topic_name")
            subscription = resolve_setting_expressions(
                spec.subscription_name, environ, f"{where}: subscription_name"
            )
            entity = f"{topic}/Subscriptions/{subscription}"
            return _Listener(
                spec, entity, topic, subscription, connection, self._settings.max_concurrent_calls
            )
        raise ConfigurationError(
            f"{where}: the Service Bus trigger names no queue (or topic and subscription)"
        )

    def start(self) -> None:
        """Start one receive loop per function; they connect (and reconnect) in the background."""
        for listener in self.listeners:
            listener.task = asyncio.create_task(
                self._listen(listener), name=f"servicebus-{listener.spec.name}"
            )
            self._tasks.append(listener.task)

    async def stop(self, deadline: float) -> None:
        """Stop receiving; messages in flight get until ``deadline`` (loop time) to finish and be settled."""
        self._deadline = deadline
        self._stopping.set()
        for listener in self.listeners:
            if listener.connecting and listener.task is not None:
                # The SDK retries a failing connect for many seconds; nothing waits on this receiver yet.
                listener.task.cancel()
            async with listener.capacity:  # wake loops waiting for a free slot
                listener.capacity.notify_all()

    async def wait_stopped(self) -> None:
        """Wait for every receive loop to end (after :meth:`stop`), then close the clients."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), CLOSE_TIMEOUT_SECONDS)
        self._clients.clear()

    def _client(self, connection_string: str) -> ServiceBusClient:
        client = self._clients.get(connection_string)
        if client is None:
            client = ServiceBusClient.from_connection_string(connection_string)
            self._clients[connection_string] = client
        return client

    def _receiver(self, listener: _Listener) -> ServiceBusReceiver:
        client = self._client(listener.connection_string)
        options: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": listener.credit - 1,
            "socket_timeout": SOCKET_TIMEOUT_SECONDS,
        }
        if listener.topic is not None and listener.subscription is not None:
            receiver = client.get_subscription_receiver(listener.topic, listener.subscription, **options)
        else:
            receiver = client.get_queue_receiver(listener.entity, **options)
        # Settle with a settled disposition (the broker applies it all the same) instead of waiting for
        # the broker's outcome. Waiting means a second reader of the link's socket: it could take the
        # next message's transfer frame while the receive loop queued behind it for the socket lock, and
        # that loop then waited out a whole SOCKET_TIMEOUT_SECONDS read before handing the message on (up
        # to 50 ms per hop: docs/performance.md, "An order's path"). A lock that expired is still refused
        # before sending; a settlement the broker refuses goes unnoticed, and the message is delivered
        # again when its lock runs out, as after a lost settlement. The SDK has no public switch for it.
        setattr(receiver, AWAIT_SETTLEMENT_OUTCOME, False)
        return receiver

    async def _wait_for_capacity(self, listener: _Listener) -> bool:
        """Wait until a receive call has room within maxConcurrentCalls (see _Listener); False if stopping."""
        async with listener.capacity:
            await listener.capacity.wait_for(lambda: self._stopping.is_set() or listener.has_room())
        return not self._stopping.is_set()

    async def _listen(self, listener: _Listener) -> None:
        backoff = BACKOFF_INITIAL_SECONDS
        failures = 0
        while not self._stopping.is_set():
            try:
                async with contextlib.AsyncExitStack() as stack:
                    listener.connecting = True
                    try:
                        receiver = await stack.enter_async_context(self._receiver(listener))
                    finally:
                        listener.connecting = False
                    renewer = asyncio.create_task(self._renew_locks(listener, receiver))
                    stack.push_async_callback(self._cancel, renewer)
                    stack.push_async_callback(self._drain, listener)  # runs before the receiver closes
                    listener.credited = 0  # a new link starts with no credit
                    while await self._wait_for_capacity(listener):
                        messages = await receiver.receive_messages(
                            max_message_count=RECEIVE_BATCH, max_wait_time=RECEIVE_WAIT_SECONDS
                        )
                        if failures:  # a receive worked: the connection is back
                            log.info(
                                "receiver for %s (Functions.%s) reconnected",
                                listener.entity,
                                listener.spec.name,
                            )
                            failures = 0
                            backoff = BACKOFF_INITIAL_SECONDS
                        listener.received(len(messages))
                        for message in messages:
                            self._dispatch(listener, receiver, message)
            except asyncio.CancelledError:
                if self._stopping.is_set():
                    return  # cancelled by stop() while connecting
                raise
            except Exception as exc:
                failures += 1
                log.error(
                    "receiver for %s (Functions.%s) failed: %s: %s; reconnecting in %.1fs",
                    listener.entity,
                    listener.spec.name,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                log.debug("receiver failure detail", exc_info=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)

    @staticmethod
    async def _cancel(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def _drain(self, listener: _Listener) -> None:
        """When stopping, let this receiver's messages finish before it closes (bounded by the deadline)."""
        if not self._stopping.is_set() or not listener.tasks:
            return
        loop = asyncio.get_running_loop()
        remaining = None if self._deadline is None else max(0.0, self._deadline - loop.time())
        _, pending = await asyncio.wait(set(listener.tasks), timeout=remaining)
        if pending:
            log.warning(
                "Functions.%s: %d message(s) still being processed at shutdown; their locks will expire "
                "and they will be delivered again",
                listener.spec.name,
                len(pending),
            )

    def _dispatch(
        self, listener: _Listener, receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage
    ) -> None:
        now = datetime.now(UTC)
        locked_until = message.locked_until_utc
        lock_duration = (locked_until - now) if locked_until else RENEW_MARGIN * 2
        delivery = _Delivery(
            message=message,
            receiver=receiver,
            renew_until=now + self._settings.max_auto_lock_renewal_duration,
            renew_margin=min(RENEW_MARGIN, max(lock_duration, timedelta(seconds=1)) / 2),
        )
        listener.deliveries.add(delivery)
        task = asyncio.create_task(self._process(listener, delivery))
        listener.tasks.add(task)
        task.add_done_callback(listener.tasks.discard)

    async def _process(self, listener: _Listener, delivery: _Delivery) -> None:
        spec = listener.spec
        message = delivery.message
        try:
            succeeded = False
            # A failure is logged by the language worker; abandoning is the host's answer to it.
            with contextlib.suppress(InvocationFailed):
                await self._worker.invoke(
                    spec.function_id,
                    [protos.ParameterBinding(name=spec.arg_name, data=message_data(message))],
                    trigger_metadata(message),
                    f"New ServiceBus message detected on '{listener.entity}' "
                    f"(MessageId={message.message_id}, DeliveryCount={message.delivery_count})",
                )
                succeeded = True
            await self._settle(listener, delivery, complete=succeeded)
        except Exception:
            log.exception(
                "Functions.%s: internal error while handling message %s", spec.name, message.message_id
            )
        finally:
            listener.deliveries.discard(delivery)
            async with listener.capacity:
                listener.capacity.notify_all()

    async def _settle(self, listener: _Listener, delivery: _Delivery, complete: bool) -> None:
        receiver = delivery.receiver
        message = delivery.message
        action = "complete" if complete else "abandon"
        try:
            if complete:
                await receiver.complete_message(message)
            else:
                await receiver.abandon_message(message)
        except Exception as exc:
            log.warning(
                "Functions.%s: could not %s message %s (%s: %s); it is delivered again when its lock expires",
                listener.spec.name,
                action,
                message.message_id,
                type(exc).__name__,
                exc,
            )

    async def _renew_locks(self, listener: _Listener, receiver: ServiceBusReceiver) -> None:
        """Renew the locks of this receiver's messages that are close to expiring.

        One renewal at a time: this task is the only user of the receiver's management link.
        """
        while True:
            await asyncio.sleep(RENEW_CHECK_SECONDS)
            for delivery in list(listener.deliveries):
                if delivery.receiver is not receiver or delivery.lock_lost:
                    continue
                now = datetime.now(UTC)
                locked_until = delivery.message.locked_until_utc
                if locked_until is None or now >= delivery.renew_until:
                    continue
                if locked_until - now > delivery.renew_margin:
                    continue
                try:
                    await receiver.renew_message_lock(delivery.message)
                except Exception as exc:
                    if delivery not in listener.deliveries:
                        continue  # settled while the renewal was under way
                    delivery.lock_lost = True
                    log.warning(
                        "Functions.%s: could not renew the lock of message %s (%s: %s)",
                        listener.spec.name,
                        delivery.message.message_id,
                        type(exc).__name__,
                        exc,
                    )
