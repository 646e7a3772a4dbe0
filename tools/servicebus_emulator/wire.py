"""The bytes between a client's socket and proton: delivery-ids renumbered so proton accepts them.

AMQP numbers the transfers of a session with consecutive delivery-ids. The sync azure-servicebus SDK
assigns them without a lock, so when several threads use one receiver or sender at once (an
``AutoLockRenewer`` with several workers, ten threads peeking) two transfers can carry the same id, or
reach the socket out of order. Service Bus accepts them; proton-c ends the connection with "sequencing
error", and every thread's request fails. So the emulator renumbers incoming transfers to the sequence
proton expects and maps the numbers back in the dispositions it sends, so the client sees its own ids.

Only the frames involved are decoded (begin, transfer, disposition, end); all other bytes pass as they
are. :class:`WireIOHandler` plugs this into proton's reactor in place of its socket handler.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from dataclasses import dataclass, field
from typing import Any

from proton import Transport
from proton.handlers import IOHandler

log = logging.getLogger("servicebus_emulator.wire")

_BEGIN, _TRANSFER, _DISPOSITION, _END = 0x11, 0x14, 0x15, 0x17
_AMQP_FRAME = 0
_HEADER = b"AMQP"
_READ_IN = frozenset({_BEGIN, _TRANSFER, _END})
_READ_OUT = frozenset({_BEGIN, _DISPOSITION})
_MAX_REMEMBERED = 10_000  # renumbered deliveries remembered per session until settled


class WireFormatError(ValueError):
    """A frame this module cannot read; the bytes are then passed on unchanged."""


# ---- a minimal AMQP 1.0 decoder for the few fields read here ----------------------------------------
def _value(buf: bytes | bytearray | memoryview, pos: int) -> tuple[Any, int]:
    """Decode the primitive at ``pos``: (value, position after it). Only the types these fields use."""
    code = buf[pos]
    if code == 0x40:
        return None, pos + 1
    if code in (0x41, 0x42):
        return code == 0x41, pos + 1
    if code in (0x43, 0x44):
        return 0, pos + 1
    if code in (0x50, 0x52, 0x53, 0x56):
        value = buf[pos + 1]
        return (bool(value) if code == 0x56 else value), pos + 2
    if code == 0x60:
        return struct.unpack_from(">H", buf, pos + 1)[0], pos + 3
    if code == 0x70:
        return struct.unpack_from(">I", buf, pos + 1)[0], pos + 5
    if code == 0x80:
        return struct.unpack_from(">Q", buf, pos + 1)[0], pos + 9
    if code == 0xA0:
        return None, pos + 2 + buf[pos + 1]
    if code == 0xB0:
        return None, pos + 5 + struct.unpack_from(">I", buf, pos + 1)[0]
    raise WireFormatError(f"unexpected type 0x{code:02x}")


def _list_header(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int]:
    """(element count, position of the first element, position after the list)."""
    code = buf[pos]
    if code == 0x45:
        return 0, pos + 1, pos + 1
    if code == 0xC0:
        return buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
    if code == 0xD0:
        size, count = struct.unpack_from(">II", buf, pos + 1)
        return count, pos + 9, pos + 5 + size
    raise WireFormatError(f"expected a list, got 0x{code:02x}")


def _encode_list(count: int, elements: bytes) -> bytes:
    if len(elements) + 1 <= 255 and count <= 255:
        return bytes((0xC0, len(elements) + 1, count)) + elements
    return b"\xd0" + struct.pack(">II", len(elements) + 4, count) + elements


def _uint(value: int) -> bytes:
    return b"\x70" + struct.pack(">I", value)


@dataclass
class _Performative:
    """Where a frame's performative is: its code, the list's element count and span."""

    code: int
    list_start: int  # offset of the list constructor, from the start of the frame
    count: int
    first: int  # offset of the first element
    end: int  # offset after the list


def _performative(frame: bytes | bytearray | memoryview, body: int) -> _Performative | None:
    """The performative of an AMQP frame starting its body at ``body``, or None for an empty frame."""
    if len(frame) <= body:
        return None
    if frame[body] != 0x00:
        raise WireFormatError("performative is not described")
    if frame[body + 1] == 0x53:
        code, pos = frame[body + 2], body + 3
    elif frame[body + 1] == 0x80:
        code, pos = struct.unpack_from(">Q", frame, body + 2)[0], body + 10
    else:
        raise WireFormatError("symbolic performative descriptors are not read")
    count, first, end = _list_header(frame, pos)
    return _Performative(code, pos, count, first, end)


def _fields(frame: bytes | bytearray | memoryview, perf: _Performative, n: int) -> list[tuple[Any, int, int]]:
    """The first ``n`` fields as (value, start, end); missing trailing fields are (None, end, end)."""
    out: list[tuple[Any, int, int]] = []
    pos = perf.first
    for index in range(n):
        if index >= perf.count:
            out.append((None, perf.end, perf.end))
            continue
        value, after = _value(frame, pos)
        out.append((value, pos, after))
        pos = after
    return out


def _rebuild(
    frame: bytes | bytearray | memoryview, perf: _Performative, elements: bytes, count: int
) -> bytes:
    """The frame with its performative's list replaced; header, descriptor and payload kept."""
    head = bytes(frame[4 : perf.list_start])
    tail = bytes(frame[perf.end :])
    body = head + _encode_list(count, elements) + tail
    return struct.pack(">I", 4 + len(body)) + body


# ---- the renumbering ----------------------------------------------------------------------------------
@dataclass
class _Session:
    """Incoming transfer numbering of one client session (keyed by the client's channel)."""

    expected: int | None = None  # the delivery-id proton expects next
    current: int | None = None  # proton's id of a transfer still being continued (more=true)
    client_ids: dict[int, int] = field(default_factory=dict)  # proton's id -> the client's, when different


class Renumberer:
    """Per-connection state: cuts both byte streams into frames and rewrites the few that need it."""

    def __init__(self) -> None:
        self._in = bytearray()
        self._out = bytearray()
        self._sessions: dict[int, _Session] = {}
        self._local_to_client: dict[int, int] = {}  # our channel -> the client's, from our begin frames
        self.renumbered = 0  # transfers renumbered so far (for logs and tests)

    # ---- client -> proton ----
    def incoming(self, data: bytes) -> bytes:
        """Take bytes read from the socket; return the complete frames, rewritten where needed."""
        if self._in:
            self._in += data
            buf: bytes | bytearray = self._in
        else:
            buf = data
        out: list[bytes | bytearray] = []
        start = pos = 0  # buf[start:pos] passes unchanged
        end = len(buf)
        while end - pos >= 8:
            if buf[pos] == 0x41 and buf[pos : pos + 4] == _HEADER:
                pos += 8
                continue
            size = struct.unpack_from(">I", buf, pos)[0]
            if size < 8:
                raise WireFormatError(f"frame size {size}")
            if end - pos < size:
                break
            body = pos + buf[pos + 4] * 4
            # Only begin, transfer and end frames are read; the code is checked before anything is decoded.
            if (
                size > body - pos + 2
                and buf[pos + 5] == _AMQP_FRAME
                and buf[body + 1] == 0x53
                and buf[body + 2] in _READ_IN
            ):
                replacement = self._incoming_frame(memoryview(buf)[pos : pos + size])
                if replacement is not None:
                    out.append(buf[start:pos])
                    out.append(replacement)
                    start = pos + size
            pos += size
        if start == 0 and pos == end:
            self._in = bytearray()
            return bytes(buf)
        out.append(buf[start:pos])
        self._in = bytearray(buf[pos:])
        return b"".join(out)

    def _incoming_frame(self, frame: memoryview) -> bytes | None:
        channel = struct.unpack_from(">H", frame, 6)[0]
        try:
            perf = _performative(frame, frame[4] * 4)
            if perf is None:
                return None
            if perf.code == _BEGIN:
                (_, _, _), (next_outgoing, _, _) = _fields(frame, perf, 2)
                self._sessions[channel] = _Session(expected=next_outgoing)
            elif perf.code == _END:
                self._sessions.pop(channel, None)
            elif perf.code == _TRANSFER:
                return self._transfer(channel, frame, perf)
        except (WireFormatError, IndexError, struct.error) as exc:
            log.debug("frame on channel %d passed unread: %s", channel, exc)
        return None

    def _transfer(self, channel: int, frame: memoryview, perf: _Performative) -> bytes | None:
        session = self._sessions.setdefault(channel, _Session())
        fields = _fields(frame, perf, 6)
        client_id, id_start, id_end = fields[1]
        more = bool(fields[5][0])
        if session.current is not None:  # a continuation: same delivery as the frame before
            wanted = session.current
        else:
            if session.expected is None:
                session.expected = client_id
            wanted = session.expected
            session.expected = (wanted + 1) & 0xFFFFFFFF
        session.current = wanted if more else None
        if client_id is None or client_id == wanted:
            return None
        session.client_ids[wanted] = client_id
        if len(session.client_ids) > _MAX_REMEMBERED:
            del session.client_ids[next(iter(session.client_ids))]
        self.renumbered += 1
        log.debug("channel %d: delivery-id %d taken as %d", channel, client_id, wanted)
        elements = bytes(frame[perf.first : id_start]) + _uint(wanted) + bytes(frame[id_end : perf.end])
        return _rebuild(frame, perf, elements, perf.count)

    # ---- proton -> client ----
    def outgoing(self, data: bytes) -> bytes:
        """Take proton's pending output; return the complete frames to send, rewritten where needed.

        A frame proton handed out only in part is kept until the rest comes.
        """
        if self._out:
            data = bytes(self._out) + data
            self._out.clear()
        out: list[bytes] = []
        start = pos = 0
        end = len(data)
        while end - pos >= 8:
            if data[pos] == 0x41 and data[pos : pos + 4] == _HEADER:
                pos += 8
                continue
            size = struct.unpack_from(">I", data, pos)[0]
            if size < 8 or end - pos < size:
                break
            body = pos + data[pos + 4] * 4
            # Most frames are transfers and flows: the code alone says they are passed unread.
            if (
                size > body - pos + 2
                and data[pos + 5] == _AMQP_FRAME
                and data[body + 1] == 0x53
                and data[body + 2] in _READ_OUT
            ):
                replacement = self._outgoing_frame(memoryview(data)[pos : pos + size])
                if replacement is not None:
                    out.append(data[start:pos])
                    out.append(replacement)
                    start = pos + size
            pos += size
        if pos < end:
            self._out += data[pos:]
        if start == 0:
            return data if pos == end else data[:pos]
        out.append(data[start:pos])
        return b"".join(out)

    def _outgoing_frame(self, frame: memoryview) -> bytes | None:
        channel = struct.unpack_from(">H", frame, 6)[0]
        try:
            perf = _performative(frame, frame[4] * 4)
            if perf is None:
                return None
            if perf.code == _BEGIN:
                (remote_channel, _, _), *_ = _fields(frame, perf, 1)
                if remote_channel is not None:
                    self._local_to_client[channel] = remote_channel
                return None
            if perf.code == _DISPOSITION:
                return self._disposition(channel, frame, perf)
        except (WireFormatError, IndexError, struct.error) as exc:
            log.debug("frame on channel %d passed unread: %s", channel, exc)
        return None

    def _disposition(self, channel: int, frame: memoryview, perf: _Performative) -> bytes | None:
        session = self._sessions.get(self._local_to_client.get(channel, -1))
        if session is None or not session.client_ids:
            return None
        (role, _, _), (first, _, _), (last, _, last_end), (settled, _, _) = _fields(frame, perf, 4)
        if not role:  # only our dispositions as receiver refer to the client's transfers
            return None
        last = first if last is None else last
        ids = list(range(first, last + 1))
        mapped = [session.client_ids.get(i, i) for i in ids]
        if settled:
            for i in ids:
                session.client_ids.pop(i, None)
        if mapped == ids:
            return None
        head = bytes(frame[perf.first : perf.first + 1])  # the role, as encoded
        rest = bytes(frame[last_end : perf.end])  # settled, state, batchable, as encoded
        count = max(perf.count, 3)
        if mapped == list(range(mapped[0], mapped[0] + len(mapped))):
            return _rebuild(frame, perf, head + _uint(mapped[0]) + _uint(mapped[-1]) + rest, count)
        # The client's numbers are not a range: one disposition each.
        return b"".join(_rebuild(frame, perf, head + _uint(m) + _uint(m) + rest, count) for m in mapped)


# ---- proton's reactor, with the renumbering between socket and transport -------------------------------
class _Wired:
    """What :class:`WireIOHandler` keeps per transport."""

    def __init__(self) -> None:
        self.renumberer = Renumberer()
        self.to_push = b""  # renumbered input proton had no room for yet
        self.to_send = bytearray()  # output taken from proton, not yet accepted by the socket


def _wired(transport: Transport) -> _Wired:
    state: _Wired | None = getattr(transport, "_emulator_wire", None)
    if state is None:
        state = _Wired()
        transport._emulator_wire = state
    return state


class WireIOHandler(IOHandler):
    """proton's socket handler, with each connection's bytes passed through a :class:`Renumberer`."""

    def on_selectable_readable(self, event: Any) -> None:
        s = event.selectable
        t = s._transport
        if not t:
            return
        wired = _wired(t)
        capacity = t.capacity()
        if capacity > 0:
            try:
                data = s.recv(capacity)
            except OSError as exc:
                log.debug("recv failed: %r", exc)
                t.close_tail()
                data = None
            if data is not None:
                if len(data) == 0:  # the client closed its end
                    self.on_selectable_error(event)
                    self.update(t, s, s._reactor.now)
                    return
                try:
                    wired.to_push += wired.renumberer.incoming(data)
                except WireFormatError as exc:
                    log.warning("unreadable bytes from a client: %s", exc)
                    t.close_tail()
                _push(t, wired)
        self.update(t, s, s._reactor.now)

    def on_selectable_writable(self, event: Any) -> None:
        s = event.selectable
        t = s._transport
        if not t:
            return
        wired = _wired(t)
        pending = t.pending()
        out = b""
        if pending > 0:
            out = wired.renumberer.outgoing(t.peek(pending))
            t.pop(pending)
        if wired.to_send:
            wired.to_send += out
            out = bytes(wired.to_send)
            wired.to_send.clear()
        if out:
            try:
                sent = s.send(out)
            except OSError as exc:
                log.debug("send failed: %r", exc)
                t.close_head()
            else:
                if sent < len(out):
                    wired.to_send += out[sent:]
        self.update(t, s, s._reactor.now)

    @staticmethod
    def update(transport: Transport, selectable: Any, now: float) -> None:
        """As proton's, but also writing while output taken from proton waits for the socket."""
        IOHandler.update(transport, selectable, now)
        wired: _Wired | None = getattr(transport, "_emulator_wire", None)
        if wired is not None:
            if wired.to_push:
                _push(transport, wired)
            if wired.to_send and not selectable.is_terminal and not selectable.writing:
                selectable.writing = True
                selectable.update()

    def on_transport_closed(self, event: Any) -> None:
        t = event.transport
        s = t._selectable
        wired: _Wired | None = getattr(t, "_emulator_wire", None)
        if s is not None and wired is not None and wired.to_send:
            # The last frames (close, detach with its error) still go out if the socket takes them.
            with contextlib.suppress(OSError):
                s.send(bytes(wired.to_send))
            wired.to_send.clear()
        super().on_transport_closed(event)


def _push(transport: Transport, wired: _Wired) -> None:
    while wired.to_push:
        try:
            room = transport.capacity()
        except Exception:
            wired.to_push = b""
            return
        if room <= 0:
            return
        chunk, wired.to_push = wired.to_push[:room], wired.to_push[room:]
        transport.push(chunk)


__all__ = ["Renumberer", "WireFormatError", "WireIOHandler"]
