"""The AMQP 1.0 side of the emulator: connections, links, transfers and settlement, on qpid-proton.

It answers the azure-servicebus SDK the way Service Bus does (see ``tools/servicebus_emulator/README.md``):
SASL ANONYMOUS, claims-based security on ``$cbs`` (any token is accepted), queue links at
``amqps://host:port/<queue>`` and ``<queue>/$DeadLetterQueue``, a ``$management`` node per queue,
lock tokens as delivery tags, and a settled disposition with the same outcome for every settlement.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from proton import (
    Condition,
    Data,
    Delivery,
    Disposition,
    Endpoint,
    Handler,
    Link,
    Message,
    Sender,
    Terminus,
    symbol,
)
from proton.reactor import ApplicationEvent, Container, EventInjector

from .codec import MessageFormatError, encode_delivery, parse_transfer, to_timestamp
from .config import EmulatorConfig
from .entity import LockLost, Outcome, Queue, State, Subqueue, scheduled_enqueue_time
from .management import INTERNAL_ERROR, LOCK_LOST, ManagementNode, Reply
from .stats import RECEIVE, SCHEDULE, SEND, OperationStats
from .wire import WireIOHandler

log = logging.getLogger("servicebus_emulator.broker")

MAX_MESSAGE_SIZE = 256 * 1024  # the Standard tier's limit
CREDIT_WINDOW = 200
DEAD_LETTER_CONDITION = "com.microsoft:dead-letter"
NOT_FOUND = "amqp:not-found"
NOT_ALLOWED = "amqp:not-allowed"
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
DECODE_ERROR = "amqp:decode-error"
SESSION_FILTER = "com.microsoft:session-filter"
# x-opt-message-state, as Service Bus sets it: 0 active, 1 deferred, 2 scheduled.
_MESSAGE_STATE = {State.ACTIVE: 0, State.LOCKED: 0, State.DEFERRED: 1, State.SCHEDULED: 2}


def error_condition(name: str, description: str) -> Condition:
    """An AMQP error as Service Bus sends it: condition, description and an info map.

    The SDK reads the three fields by position, so an error without ``info`` (which proton leaves out
    when it is empty) makes its send callback fail and the send wait for its timeout.
    """
    return Condition(name, description, {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())})


@dataclass
class ConnectionState:
    """What the broker keeps per client connection."""

    peer: str
    cbs_reply: Sender | None = None
    management_replies: dict[str, Sender] = field(default_factory=dict)
    links: set[Link] = field(default_factory=set)


@dataclass
class LinkState:
    """What a link is attached to."""

    kind: str  # "queue" | "cbs" | "management"
    queue: Queue | None = None
    subqueue: Subqueue | None = None
    receive_and_delete: bool = False
    management: ManagementNode | None = None
    address: str = ""


def entity_path(address: str | None) -> str:
    """``amqps://host:port/orders/$DeadLetterQueue`` -> ``orders/$DeadLetterQueue``."""
    if not address:
        return ""
    if "://" in address:
        rest = address.split("://", 1)[1]
        address = rest.split("/", 1)[1] if "/" in rest else ""
    return address.strip("/")


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """Log and survive an error in one event: one bad client must not take the broker down."""

    @functools.wraps(method)
    def wrapper(self: Broker, event: Any) -> None:
        try:
            method(self, event)
        except Exception:
            log.exception("error while handling %s", method.__name__)

    return wrapper


class Broker(Handler):
    """A proton event handler that is the whole broker. Single-threaded: proton calls it in turn."""

    def __init__(
        self,
        config: EmulatorConfig,
        *,
        clock: Callable[[], float] = time.time,
        tick_interval: float = 0.05,
        stats: OperationStats | None = None,
    ) -> None:
        super().__init__()
        self.stats = stats or OperationStats()
        self.queues = {name: Queue(name, props) for name, props in config.queues.items()}
        self._display_names = {q.name.lower(): q.name for q in config.namespace.queues}
        self._clock = clock
        self._tick_interval = tick_interval
        self._consumers: dict[Subqueue, list[Sender]] = {}
        self._round_robin: dict[Subqueue, int] = {}
        self._container: Container | None = None
        self._injector = EventInjector()
        self._answered = False  # whether the transfer being handled has been answered

    # ---- lifecycle -----------------------------------------------------------------------------
    def run(self, host: str, port: int, on_listening: Callable[[], None] | None = None) -> None:
        """Listen and serve until :meth:`request_stop` is called."""
        container = Container(self)
        # Sockets go through the renumbering of delivery-ids (see wire.py), as Service Bus tolerates them.
        container.global_handler = WireIOHandler()
        self._container = container
        container.selectable(self._injector)
        container.listen(f"{host}:{port}")
        log.info(
            "listening on %s:%d with queues: %s", host, port, ", ".join(sorted(self._display_names.values()))
        )
        if on_listening is not None:
            on_listening()
        container.run()
        self.stats.write()
        log.info("stopped")

    def request_stop(self) -> None:
        """Ask the broker to close every connection and return from :meth:`run`; signal-safe."""
        self._injector.trigger(ApplicationEvent("stop_broker"))

    @_guarded
    def on_stop_broker(self, event: Any) -> None:
        log.info("shutting down")
        self._injector.close()
        if self._container is not None:
            self._container.stop()

    @_guarded
    def on_reactor_init(self, event: Any) -> None:
        event.container.schedule(self._tick_interval, self)

    @_guarded
    def on_timer_task(self, event: Any) -> None:
        now = self._clock()
        for queue in self.queues.values():
            for subqueue in queue.tick(now):
                self._dispatch(subqueue)
        self.stats.maybe_write()
        event.container.schedule(self._tick_interval, self)

    # ---- connections and sessions --------------------------------------------------------------
    @_guarded
    def on_connection_bound(self, event: Any) -> None:
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")

    @_guarded
    def on_connection_remote_open(self, event: Any) -> None:
        connection = event.connection
        url = getattr(connection, "url", None)
        peer = f"{url.host}:{url.port}" if url is not None else "?"
        connection.emulator = ConnectionState(peer=peer)
        if connection.state & Endpoint.LOCAL_UNINIT:
            connection.open()
        log.debug("connection opened from %s (container %s)", peer, connection.remote_container)

    @_guarded
    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    @_guarded
    def on_session_remote_close(self, event: Any) -> None:
        event.session.close()

    @_guarded
    def on_connection_remote_close(self, event: Any) -> None:
        self._forget_connection(event.connection, "closed")
        event.connection.close()

    @_guarded
    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        state: ConnectionState | None = getattr(event.connection, "emulator", None)
        if condition is None:
            return
        if state is None:  # never opened: a port probe (the launcher's), not a client
            log.debug("connection closed before opening: %s", condition.description)
            return
        log.warning("connection from %s failed: %s: %s", state.peer, condition.name, condition.description)

    @_guarded
    def on_transport_closed(self, event: Any) -> None:
        if event.connection is not None:
            self._forget_connection(event.connection, "dropped")

    def _forget_connection(self, connection: Any, how: str) -> None:
        state: ConnectionState | None = getattr(connection, "emulator", None)
        if state is None:
            return
        for link in list(state.links):
            self._forget_link(link)
        log.debug("connection from %s %s", state.peer, how)
        del connection.emulator

    # ---- links ---------------------------------------------------------------------------------
    @_guarded
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        address = link.remote_source.address if link.is_sender else link.remote_target.address
        path = entity_path(address)
        lowered = path.lower()
        conn_state: ConnectionState = event.connection.emulator
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode

        if lowered == "$cbs":
            state = LinkState(kind="cbs", address=path)
            if link.is_sender:
                conn_state.cbs_reply = link
        elif lowered.endswith("/$management"):
            queue, dead_letter = self._lookup(lowered.removesuffix("/$management"))
            if queue is None:
                self._refuse(link, address)
                return
            state = LinkState(kind="management", queue=queue, address=path)
            if link.is_sender:
                conn_state.management_replies[lowered] = link
            else:
                state.management = ManagementNode(queue, dead_letter, self._encode, self.stats)
        else:
            queue, dead_letter = self._lookup(lowered)
            if queue is None:
                self._refuse(link, address)
                return
            if dead_letter and link.is_receiver:
                self._refuse(
                    link, address, "Sending to a dead-letter queue is not allowed.", "amqp:not-allowed"
                )
                return
            if link.is_sender and _has_session_filter(link.remote_source.filter):
                self._refuse(
                    link,
                    address,
                    f"The queue '{queue.name}' does not use sessions: this emulator has none, "
                    "so a receiver for a session is refused.",
                    NOT_ALLOWED,
                )
                return
            subqueue = queue.subqueue(dead_letter)
            state = LinkState(
                kind="queue",
                queue=queue,
                subqueue=subqueue,
                receive_and_delete=link.remote_snd_settle_mode == Link.SND_SETTLED,
                address=path,
            )
            if link.is_sender:
                self._consumers.setdefault(subqueue, []).append(link)
            else:
                link.max_message_size = MAX_MESSAGE_SIZE
        link.emulator = state
        conn_state.links.add(link)
        link.open()
        if link.is_receiver:
            link.flow(CREDIT_WINDOW)
        log.debug(
            "link attached: %s %s %s",
            "receiver" if link.is_sender else "sender",
            "RECEIVE_AND_DELETE" if state.receive_and_delete else "",
            path,
        )

    def _lookup(self, lowered_path: str) -> tuple[Queue | None, bool]:
        dead_letter = lowered_path.endswith("/$deadletterqueue")
        name = lowered_path.removesuffix("/$deadletterqueue")
        return self.queues.get(name), dead_letter

    def _refuse(
        self, link: Link, address: str | None, description: str | None = None, name: str = NOT_FOUND
    ) -> None:
        """Attach, then detach at once with an error, as Service Bus does for a missing entity."""
        text = description or f"The messaging entity '{address}' could not be found."
        log.warning("refused link to %s: %s", address, text)
        # A refused link is answered with a null terminus (AMQP 1.0, 2.6.3), so the client fails on the
        # attach itself rather than sending into it and reading the detach as a retryable error.
        if link.is_receiver:
            link.target.type = Terminus.UNSPECIFIED
        else:
            link.source.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = error_condition(name, text)
        link.close()

    @_guarded
    def on_link_remote_close(self, event: Any) -> None:
        self._forget_link(event.link)
        event.link.close()

    def _forget_link(self, link: Link) -> None:
        state: LinkState | None = getattr(link, "emulator", None)
        if state is None:
            return
        if state.subqueue is not None and isinstance(link, Sender):
            consumers = self._consumers.get(state.subqueue, [])
            if link in consumers:
                consumers.remove(link)
        connection = link.connection
        conn_state: ConnectionState | None = getattr(connection, "emulator", None)
        if conn_state is not None:
            conn_state.links.discard(link)
            if conn_state.cbs_reply == link:
                conn_state.cbs_reply = None
            for key, reply_link in list(conn_state.management_replies.items()):
                if reply_link == link:
                    del conn_state.management_replies[key]
        del link.emulator
        log.debug("link detached: %s", state.address)

    @_guarded
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        state: LinkState | None = getattr(link, "emulator", None)
        if link.is_sender and state is not None and state.subqueue is not None:
            self._dispatch(state.subqueue)
            if link.drain_mode and link.credit > 0:
                link.drained()

    # ---- deliveries ----------------------------------------------------------------------------
    @_guarded
    def on_delivery(self, event: Any) -> None:
        link = event.link
        state: LinkState | None = getattr(link, "emulator", None)
        delivery: Delivery = event.delivery
        if state is None:
            delivery.settle()
            return
        if link.is_receiver:
            if delivery.readable and not delivery.partial:
                self._on_transfer(link, state, delivery)
        elif state.kind == "queue":
            self._answered = False
            try:
                self._on_settlement(state, delivery)
            except Exception as exc:
                # As for transfers: the receiver gets an answer at once, not its 60-second wait.
                log.exception("%s: failed to apply a settlement", state.address)
                self._answer_failure(delivery, "settle", exc)
        elif delivery.remote_state or delivery.settled:
            delivery.settle()

    def _on_transfer(self, link: Any, state: LinkState, delivery: Delivery) -> None:
        raw = link.recv(delivery.pending)
        link.advance()
        if link.credit < CREDIT_WINDOW // 2:
            link.flow(CREDIT_WINDOW - link.credit)
        self._answered = False
        try:
            if state.kind == "queue":
                self._enqueue(state, delivery, raw)
            elif state.kind == "cbs":
                self._on_cbs(link, delivery, raw)
            elif state.kind == "management" and state.management is not None:
                self._on_management(link, state, delivery, raw)
        except Exception as exc:
            # Whatever went wrong, the client gets an answer at once instead of waiting for its timeout.
            log.exception("%s: failed to handle a transfer", state.address)
            self._answer_failure(delivery, "handle the message", exc)

    def _answer_failure(self, delivery: Delivery, what: str, exc: Exception) -> None:
        """Reject ``delivery`` with amqp:internal-error, unless its handler answered before it failed."""
        if not self._answered:
            self._answer(
                delivery,
                Disposition.REJECTED,
                error_condition(INTERNAL_ERROR, f"The emulator failed to {what}: {exc!r}"),
            )

    def _on_cbs(self, link: Any, delivery: Delivery, raw: bytes) -> None:
        """A put-token request: accept any token for the namespace or a configured queue.

        A token for a queue that does not exist is refused with 404, as Service Bus does; the SDK
        raises ``ServiceBusAuthenticationError`` for it before it attaches any link.
        """
        request = _decode_request(raw)
        if request is None:
            self._answer(
                delivery, Disposition.REJECTED, error_condition(DECODE_ERROR, "Undecodable request.")
            )
            return
        self._answer(delivery, Disposition.ACCEPTED)
        properties: dict[Any, Any] = request.properties or {}
        audience = str(properties.get("name", ""))
        status, description = 202, "Accepted"
        queue, _ = self._lookup(_audience_entity(audience))
        if _audience_entity(audience) and queue is None:
            status = 404
            description = f"The messaging entity '{audience}' could not be found."
            log.warning("refused a token for %s: no such queue", audience)
        reply = Message(
            correlation_id=request.id,
            properties={"status-code": status, "status-description": description},
        )
        conn_state: ConnectionState = link.connection.emulator
        self._reply(conn_state.cbs_reply, reply)

    def _on_management(self, link: Any, state: LinkState, delivery: Delivery, raw: bytes) -> None:
        """A ``$management`` request: answer it on the reply link, correlated with its message-id."""
        assert state.management is not None
        request = _decode_request(raw)
        if request is None:
            self._answer(
                delivery, Disposition.REJECTED, error_condition(DECODE_ERROR, "Undecodable request.")
            )
            return
        self._answer(delivery, Disposition.ACCEPTED)
        conn_state: ConnectionState = link.connection.emulator
        reply_to = entity_path(request.reply_to).lower() or state.address.lower()
        reply_link = conn_state.management_replies.get(reply_to)
        try:
            reply = state.management.handle(request, self._clock()).to_message(request.id)
            self._reply(reply_link, reply)
        except Exception as exc:
            log.exception("%s: failed to answer a management request", state.address)
            failure = Reply(
                500, f"The emulator failed to handle the request: {exc!r}", condition=INTERNAL_ERROR
            )
            self._reply(reply_link, failure.to_message(request.id))
        self._dispatch_queue(state.queue)

    def _enqueue(self, state: LinkState, delivery: Delivery, raw: bytes) -> None:
        assert state.subqueue is not None
        if len(raw) > MAX_MESSAGE_SIZE:
            self._answer(
                delivery,
                Disposition.REJECTED,
                error_condition(SIZE_EXCEEDED, f"The message is larger than {MAX_MESSAGE_SIZE} bytes."),
            )
            return
        try:
            parsed = parse_transfer(raw)
        except MessageFormatError as exc:
            log.warning("%s: rejected an undecodable message: %s", state.subqueue.path, exc)
            self._answer(delivery, Disposition.REJECTED, error_condition(DECODE_ERROR, str(exc)))
            return
        now = self._clock()
        for sections in parsed:
            state.subqueue.send(sections, now)
            self.stats.add(
                state.subqueue.path, SEND if scheduled_enqueue_time(sections) is None else SCHEDULE
            )
        self._answer(delivery, Disposition.ACCEPTED)
        self._dispatch(state.subqueue)

    def _on_settlement(self, state: LinkState, delivery: Delivery) -> None:
        """A receiver settled a peek-locked message: apply it and answer with the same outcome."""
        assert state.subqueue is not None
        remote = delivery.remote_state
        if delivery.local_state or not remote:
            if delivery.settled:
                delivery.settle()
            return
        # proton's binding decodes tags as UTF-8, so the lock token is kept on the delivery instead.
        token: uuid.UUID = delivery.lock_token
        reason = description = None
        if remote == Disposition.ACCEPTED:
            outcome = Outcome.COMPLETE
        elif remote == Disposition.REJECTED:
            outcome = Outcome.DEAD_LETTER
            reason, description = _dead_letter_info(delivery.remote.condition)
        elif remote == Disposition.MODIFIED:
            outcome = Outcome.DEFER if delivery.remote.undeliverable else Outcome.ABANDON
        elif remote == Disposition.RELEASED:
            outcome = Outcome.RELEASE
        else:
            delivery.settle()
            return
        self.stats.add(state.subqueue.path, outcome.stat)
        try:
            state.subqueue.settle(token, outcome, self._clock(), reason, description)
        except LockLost as exc:
            self._answer(delivery, Disposition.REJECTED, error_condition(LOCK_LOST, str(exc)))
            return
        if remote == Disposition.MODIFIED:
            delivery.local.failed = bool(delivery.remote.failed)
            delivery.local.undeliverable = bool(delivery.remote.undeliverable)
        self._answer(delivery, remote)
        self._dispatch_queue(state.queue)

    def _answer(self, delivery: Delivery, outcome: int, condition: Condition | None = None) -> None:
        self._answered = True
        if condition is not None:
            delivery.local.condition = condition
        delivery.update(outcome)
        delivery.settle()

    @staticmethod
    def _reply(link: Sender | None, message: Message) -> None:
        if link is None:
            log.warning("no reply link for a request; the reply is dropped")
            return
        delivery = link.delivery(uuid.uuid4().bytes)  # type: ignore[arg-type]  # proton takes bytes; typed str
        link.send(message.encode())
        link.advance()
        if link.snd_settle_mode == Link.SND_SETTLED:
            delivery.settle()

    # ---- handing messages to receivers ---------------------------------------------------------
    def _dispatch_queue(self, queue: Queue | None) -> None:
        if queue is not None:
            self._dispatch(queue.main)
            self._dispatch(queue.dead_letter)

    def _dispatch(self, subqueue: Subqueue) -> None:
        """Give available messages to receivers with credit, round-robin across competing links."""
        consumers = self._consumers.get(subqueue)
        if not consumers or not subqueue.has_available:
            return
        now = self._clock()
        if len(consumers) == 1:  # the usual case: no round-robin to keep
            link = consumers[0]
            state: LinkState = link.emulator
            while subqueue.has_available and link.credit > 0:
                if not self._deliver(link, state, subqueue, now):
                    break
        else:
            start = self._round_robin.get(subqueue, 0)
            while subqueue.has_available:
                ready = [link for link in consumers if link.credit > 0]
                if not ready:
                    break
                delivered = False
                for i in range(len(ready)):
                    link = ready[(start + i) % len(ready)]
                    if not self._deliver(link, link.emulator, subqueue, now):
                        break
                    delivered = True
                start += 1
                if not delivered:
                    break
            self._round_robin[subqueue] = start % len(consumers)
        for link in consumers:
            if link.drain_mode and link.credit > 0 and not subqueue.has_available:
                link.drained()

    def _deliver(self, link: Sender, state: LinkState, subqueue: Subqueue, now: float) -> bool:
        """Send the next available message on ``link``; False if there was none."""
        locked = not state.receive_and_delete
        message = subqueue.acquire(now, lock=locked)
        if message is None:
            return False
        payload = self._encode(message, subqueue, locked)
        tag = message.lock_token.bytes_le if message.lock_token else uuid.uuid4().bytes_le
        delivery = link.delivery(tag)  # type: ignore[arg-type]  # proton takes bytes; typed str
        delivery.lock_token = message.lock_token
        link.send(payload)
        link.advance()
        self.stats.add(subqueue.path, RECEIVE)
        if not locked:
            delivery.settle()
        return True

    @staticmethod
    def _encode(message: Any, subqueue: Subqueue, locked: bool) -> bytes:
        annotations: dict[str, Any] = {
            "x-opt-sequence-number": int(message.sequence_number),
            "x-opt-enqueued-time": to_timestamp(message.enqueued_time),
        }
        if locked and message.locked_until is not None:
            annotations["x-opt-locked-until"] = to_timestamp(message.locked_until)
        annotations["x-opt-message-state"] = 1 if message.deferred else _MESSAGE_STATE[message.state]
        return encode_delivery(
            message.sections,
            delivery_count=message.delivery_count,
            annotations=annotations,
            application_properties=message.dead_letter_properties or None,
            lock_token=message.lock_token if locked else None,
        )


def _has_session_filter(filters: Data) -> bool:
    """True if a receiver's source asks for a session (the ``com.microsoft:session-filter`` key)."""
    if filters is None:
        return False
    filters.rewind()
    if not filters.next() or filters.type() != Data.MAP:
        return False
    count = filters.get_map()
    filters.enter()
    try:
        for _ in range(count // 2):
            filters.next()
            key = filters.get_object()
            filters.next()
            if str(key) == SESSION_FILTER:
                return True
    finally:
        filters.exit()
        filters.rewind()
    return False


def _audience_entity(audience: str) -> str:
    """``sb://host:port/orders/$management`` -> ``orders``; empty for the namespace itself."""
    path = entity_path(audience).lower()
    for suffix in ("/$management", "/$deadletterqueue"):
        path = path.removesuffix(suffix)
    return path


def _decode_request(raw: bytes) -> Message | None:
    message = Message()
    try:
        message.decode(raw)
    except Exception as exc:  # a bad request must not take the broker down
        log.warning("undecodable request message: %s", exc)
        return None
    return message


def _dead_letter_info(condition: Condition | None) -> tuple[str | None, str | None]:
    if condition is None or not condition.info:
        return None, None
    info = {str(k): v for k, v in cast(dict[Any, Any], condition.info).items()}
    reason = info.get("DeadLetterReason")
    description = info.get("DeadLetterErrorDescription")
    return (None if reason is None else str(reason)), (None if description is None else str(description))
