"""AMQP 1.0 message sections: split what a client sent, and build what the broker delivers.

The broker keeps the bare message (properties, application properties, body, footer) exactly as the
sender encoded it, so every property round-trips byte for byte. It re-encodes only what a broker owns:
the header (delivery count) and the message annotations (sequence number, enqueued time, lock).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from proton import Data, symbol, timestamp

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78
BODY_SECTIONS = (DATA, AMQP_SEQUENCE, AMQP_VALUE)

_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}

# Section order on the wire, as the AMQP 1.0 spec lays it out.
_ORDER = {code: i for i, code in enumerate(range(HEADER, FOOTER + 1))}


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message."""


@dataclass(frozen=True)
class Section:
    """One section: its descriptor code, its raw encoding and, for the sections the broker reads
    (header, properties, message annotations, data), its decoded value; None for the others."""

    code: int
    raw: bytes
    value: Any


@dataclass
class MessageSections:
    """A message as the broker stores it."""

    header: list[Any] = field(default_factory=list)
    annotations: dict[Any, Any] = field(default_factory=dict)
    properties: list[Any] = field(default_factory=list)
    delivery_annotations_raw: bytes = b""
    properties_raw: bytes = b""
    application_properties_raw: bytes = b""
    body_raw: bytes = b""
    footer_raw: bytes = b""
    body_codes: tuple[int, ...] = ()

    @property
    def message_id(self) -> Any:
        """The ``message-id`` property, or None."""
        return self.properties[0] if self.properties else None

    @property
    def header_ttl_ms(self) -> int | None:
        """The sender's time-to-live in milliseconds, or None."""
        return int(self.header[2]) if len(self.header) > 2 and self.header[2] is not None else None

    @property
    def size(self) -> int:
        """Encoded size of the bare message, for logs and limits."""
        return len(self.application_properties_raw) + len(self.body_raw) + len(self.footer_raw)


# Only these sections are decoded into Python values; the rest are kept as the sender's bytes, so a
# value proton cannot turn into Python (a map with binary keys) never stops a message.
_DECODED = frozenset({HEADER, PROPERTIES, MESSAGE_ANNOTATIONS, DATA})


def value_of(data: Data) -> Any:
    """The current value of ``data`` as Python, with binary values (also map keys) as ``bytes``.

    proton's own ``get_object`` yields binary as a writable memoryview, which cannot be a dict key.
    """
    kind = data.type()
    if kind == Data.MAP:
        count = data.get_map()
        result: dict[Any, Any] = {}
        data.enter()
        for _ in range(count // 2):
            data.next()
            key = value_of(data)
            data.next()
            result[key] = value_of(data)
        data.exit()
        return result
    if kind == Data.LIST:
        count = data.get_list()
        items = []
        data.enter()
        for _ in range(count):
            data.next()
            items.append(value_of(data))
        data.exit()
        return items
    if kind == Data.BINARY:
        return bytes(data.get_binary())
    value = data.get_object()
    return bytes(value) if isinstance(value, memoryview) else value


def split_sections(raw: bytes) -> list[Section]:
    """Split a sequence of described sections; raise :class:`MessageFormatError` if it is not one."""
    sections: list[Section] = []
    view = bytes(raw)
    pos = 0
    while pos < len(view):
        data = Data()
        try:
            consumed = data.decode(view[pos:])
        except Exception as exc:
            raise MessageFormatError(f"undecodable AMQP data at byte {pos}: {exc}") from exc
        if consumed <= 0:
            raise MessageFormatError(f"undecodable AMQP data at byte {pos}")
        data.rewind()
        data.next()
        if data.type() != Data.DESCRIBED:
            raise MessageFormatError(f"expected a described section at byte {pos}")
        data.enter()
        data.next()
        descriptor = data.get_object()
        code = _SYMBOLIC.get(str(descriptor), -1) if isinstance(descriptor, symbol) else int(descriptor or -1)
        if code not in _ORDER:
            raise MessageFormatError(f"unknown section descriptor {descriptor!r}")
        value = None
        if code in _DECODED:
            data.next()
            try:
                value = value_of(data)
            except Exception as exc:
                raise MessageFormatError(f"undecodable section at byte {pos}: {exc}") from exc
        sections.append(Section(code, view[pos : pos + consumed], value))
        pos += consumed
    if not sections:
        raise MessageFormatError("empty message")
    return sections


def parse_message(raw: bytes) -> MessageSections:
    """Parse one encoded message into the parts the broker keeps.

    A message may have no body section at all (the SDK sends ``body=None`` that way); it is kept so.
    """
    return _from_sections(split_sections(raw))


def _from_sections(sections: list[Section]) -> MessageSections:
    parsed = MessageSections()
    app_props: list[bytes] = []
    body: list[bytes] = []
    footer: list[bytes] = []
    body_codes: list[int] = []
    for section in sections:
        if section.code == HEADER:
            parsed.header = list(section.value or [])
        elif section.code == DELIVERY_ANNOTATIONS:
            parsed.delivery_annotations_raw = section.raw
        elif section.code == MESSAGE_ANNOTATIONS:
            parsed.annotations = dict(section.value or {})
        elif section.code == PROPERTIES:
            parsed.properties = list(section.value or [])
            parsed.properties_raw = section.raw
        elif section.code == APPLICATION_PROPERTIES:
            app_props.append(section.raw)
        elif section.code in BODY_SECTIONS:
            body.append(section.raw)
            body_codes.append(section.code)
        elif section.code == FOOTER:
            footer.append(section.raw)
    parsed.application_properties_raw = b"".join(app_props)
    parsed.body_raw = b"".join(body)
    parsed.footer_raw = b"".join(footer)
    parsed.body_codes = tuple(body_codes)
    return parsed


def split_batch(raw: bytes) -> list[bytes] | None:
    """Return the inner messages if ``raw`` is a batch envelope, else None.

    A batch (message format 0x80013700) carries one data section per encoded message. The transfer's
    message format is not visible through proton's Python binding, so a batch is recognised by its
    content: data sections only, each of which is itself a complete AMQP message.
    """
    try:
        sections = split_sections(raw)
    except MessageFormatError:
        return None
    batch = _batch(sections)
    return None if batch is None else [inner for inner, _ in batch]


def parse_transfer(raw: bytes) -> list[MessageSections]:
    """The messages one transfer carries: the inner messages of a batch, or the message itself.

    Each section is decoded once, also for a batch. Raises :class:`MessageFormatError`.
    """
    sections = split_sections(raw)
    batch = _batch(sections)
    if batch is None:
        return [_from_sections(sections)]
    return [parsed for _, parsed in batch]


def _batch(sections: list[Section]) -> list[tuple[bytes, MessageSections]] | None:
    inner = [s.value for s in sections if s.code == DATA]
    if not inner or any(s.code in (AMQP_SEQUENCE, AMQP_VALUE) for s in sections):
        return None
    out = []
    for payload in inner:
        if not isinstance(payload, bytes) or payload[:2] != b"\x00\x53":
            return None
        try:
            out.append((payload, parse_message(payload)))
        except MessageFormatError:
            return None
    return out


def _put_described_map(data: Data, code: int, value: dict[Any, Any]) -> None:
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_dict(value)
    data.exit()


# The delivery-annotations section {x-opt-lock-token: <uuid>} up to the 16 bytes of the uuid, built once:
# it goes on every peek-locked delivery.
_LOCK_TOKEN_KEY = b"x-opt-lock-token"
_LOCK_TOKEN_PREFIX = (
    bytes([0x00, 0x53, DELIVERY_ANNOTATIONS, 0xC1, 2 + len(_LOCK_TOKEN_KEY) + 1 + 16 + 1, 2, 0xA3])
    + bytes([len(_LOCK_TOKEN_KEY)])
    + _LOCK_TOKEN_KEY
    + b"\x98"
)


def _delivery_annotations(message: MessageSections, lock_token: uuid.UUID | None) -> bytes:
    """The sender's delivery annotations, with ``x-opt-lock-token`` added when the message is locked."""
    if not message.delivery_annotations_raw:
        return b"" if lock_token is None else _LOCK_TOKEN_PREFIX + lock_token.bytes
    if lock_token is None:
        return message.delivery_annotations_raw
    merged = decode_map_section(message.delivery_annotations_raw)
    merged[symbol("x-opt-lock-token")] = lock_token
    data = Data()
    _put_described_map(data, DELIVERY_ANNOTATIONS, merged)
    return bytes(data.encode())


_SYMBOLS: dict[str, bytes] = {}  # annotation keys, encoded as symbols


def _broker_annotations(annotations: dict[str, Any]) -> bytes | None:
    """The message-annotations section for the broker's own entries, encoded by hand (each delivery
    needs one, and proton's generic map encoding is most of a delivery's cost); None if a value is not a
    timestamp or an integer, for the generic path to encode."""
    parts = []
    for key, value in annotations.items():
        raw_key = _SYMBOLS.get(key)
        if raw_key is None:
            raw_key = _SYMBOLS[key] = bytes((0xA3, len(key))) + key.encode("ascii")
        if isinstance(value, timestamp):
            encoded = b"\x83" + struct.pack(">q", value)
        elif isinstance(value, int) and not isinstance(value, bool):
            encoded = b"\x81" + struct.pack(">q", value)
        else:
            return None
        parts.append(raw_key + encoded)
    elements = b"".join(parts)
    count = 2 * len(parts)
    if len(elements) + 1 <= 255:
        return bytes((0x00, 0x53, MESSAGE_ANNOTATIONS, 0xC1, len(elements) + 1, count)) + elements
    head = bytes((0x00, 0x53, MESSAGE_ANNOTATIONS, 0xD1))
    return head + struct.pack(">II", len(elements) + 4, count) + elements


def _header(*, durable: bool, priority: int, ttl_ms: int | None, delivery_count: int) -> bytes:
    """The header section, encoded by hand: it is the same five fields on every delivery.

    ``first-acquirer`` is true on the first delivery; the delivery count is always written.
    """
    ttl = b"\x40" if ttl_ms is None else b"\x70" + struct.pack(">I", ttl_ms & 0xFFFFFFFF)
    fields = (
        (b"\x41" if durable else b"\x42")
        + bytes((0x50, priority & 0xFF))
        + ttl
        + (b"\x41" if delivery_count == 0 else b"\x42")
        + b"\x70"
        + struct.pack(">I", delivery_count)
    )
    return bytes((0x00, 0x53, HEADER, 0xC0, len(fields) + 1, 5)) + fields


def encode_delivery(
    message: MessageSections,
    *,
    delivery_count: int,
    annotations: dict[str, Any],
    application_properties: dict[str, Any] | None = None,
    lock_token: uuid.UUID | None = None,
) -> bytes:
    """Encode a message for delivery: a fresh header and annotations, then the stored bare message.

    ``delivery_count`` is always written, including zero: clients read a missing count as None.
    ``application_properties`` entries are merged over the stored ones when given (dead-lettering).
    The sender's delivery annotations are passed on, with ``x-opt-lock-token`` when ``lock_token``
    is given, as Service Bus does.
    """
    header = list(message.header) + [None] * (5 - len(message.header))
    header_raw = _header(
        durable=bool(header[0]),
        priority=4 if header[1] is None else int(header[1]),
        ttl_ms=None if header[2] is None else int(header[2]),
        delivery_count=delivery_count,
    )
    annotations_raw = None if message.annotations else _broker_annotations(annotations)
    if annotations_raw is None:
        data = Data()
        merged = dict(message.annotations)
        merged.update({symbol(k): v for k, v in annotations.items()})
        _put_described_map(data, MESSAGE_ANNOTATIONS, merged)
        annotations_raw = bytes(data.encode())

    app_raw = message.application_properties_raw
    if application_properties:
        current = decode_map_section(app_raw) if app_raw else {}
        current.update(application_properties)
        extra = Data()
        _put_described_map(extra, APPLICATION_PROPERTIES, current)
        app_raw = extra.encode()
    return (
        header_raw
        + _delivery_annotations(message, lock_token)
        + annotations_raw
        + message.properties_raw
        + app_raw
        + message.body_raw
        + message.footer_raw
    )


def decode_map_section(raw: bytes) -> dict[Any, Any]:
    """Decode a map section (application or delivery annotations) to a dict, keeping AMQP types."""
    data = Data()
    try:
        data.decode(raw)
        data.rewind()
        data.next()
        data.enter()
        data.next()
        data.next()
        value = value_of(data)
    except Exception as exc:
        raise MessageFormatError(f"undecodable map section: {exc}") from exc
    return dict(value or {})


def to_timestamp(epoch_seconds: float) -> timestamp:
    """An AMQP timestamp (milliseconds since the epoch)."""
    return timestamp(int(epoch_seconds * 1000))
