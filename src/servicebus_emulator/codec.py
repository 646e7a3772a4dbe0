"""AMQP 1.0 message sections: split what a client sent, and build what the broker delivers.

The broker keeps the bare message (properties, application properties, body, footer) exactly as the
sender encoded it, so every property round-trips byte for byte. It re-encodes only what a broker owns:
the header (delivery count) and the message annotations (sequence number, enqueued time, lock).
"""

from __future__ import annotations

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
    """One section: its descriptor code, its raw encoding and its decoded value."""

    code: int
    raw: bytes
    value: Any


@dataclass
class MessageSections:
    """A message as the broker stores it."""

    header: list[Any] = field(default_factory=list)
    annotations: dict[Any, Any] = field(default_factory=dict)
    properties: list[Any] = field(default_factory=list)
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


def split_sections(raw: bytes) -> list[Section]:
    """Decode a sequence of described sections; raise :class:`MessageFormatError` if it is not one."""
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
        data.next()
        value = data.get_object()
        if isinstance(value, memoryview):
            value = bytes(value)
        sections.append(Section(code, view[pos : pos + consumed], value))
        pos += consumed
    if not sections:
        raise MessageFormatError("empty message")
    return sections


def parse_message(raw: bytes) -> MessageSections:
    """Parse one encoded message into the parts the broker keeps."""
    sections = split_sections(raw)
    parsed = MessageSections()
    app_props: list[bytes] = []
    body: list[bytes] = []
    footer: list[bytes] = []
    body_codes: list[int] = []
    for section in sections:
        if section.code == HEADER:
            parsed.header = list(section.value or [])
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
        # Delivery annotations are for one hop only: the broker does not keep the sender's.
    if not body:
        raise MessageFormatError("message has no body section")
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
    inner = [s.value for s in sections if s.code == DATA]
    if not inner or any(s.code in (AMQP_SEQUENCE, AMQP_VALUE) for s in sections):
        return None
    for payload in inner:
        if not isinstance(payload, bytes) or payload[:2] != b"\x00\x53":
            return None
        try:
            parse_message(payload)
        except MessageFormatError:
            return None
    return inner


def _put_described_map(data: Data, code: int, value: dict[Any, Any]) -> None:
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_dict(value)
    data.exit()


def encode_delivery(
    message: MessageSections,
    *,
    delivery_count: int,
    annotations: dict[str, Any],
    application_properties: dict[str, Any] | None = None,
) -> bytes:
    """Encode a message for delivery: a fresh header and annotations, then the stored bare message.

    ``delivery_count`` is always written, including zero: clients read a missing count as None.
    ``application_properties`` entries are merged over the stored ones when given (dead-lettering).
    """
    header = list(message.header) + [None] * (5 - len(message.header))
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(HEADER)
    data.put_list()
    data.enter()
    data.put_bool(bool(header[0]))
    data.put_ubyte(4 if header[1] is None else int(header[1]))
    if header[2] is None:
        data.put_null()
    else:
        data.put_uint(int(header[2]))
    data.put_bool(delivery_count == 0)
    data.put_uint(delivery_count)
    data.exit()
    data.exit()
    merged = dict(message.annotations)
    merged.update({symbol(k): v for k, v in annotations.items()})
    _put_described_map(data, MESSAGE_ANNOTATIONS, merged)
    head = data.encode()

    app_raw = message.application_properties_raw
    if application_properties:
        current = decode_map_section(app_raw) if app_raw else {}
        current.update(application_properties)
        extra = Data()
        _put_described_map(extra, APPLICATION_PROPERTIES, current)
        app_raw = extra.encode()
    return bytes(head) + message.properties_raw + app_raw + message.body_raw + message.footer_raw


def decode_map_section(raw: bytes) -> dict[Any, Any]:
    """Decode a map section (application properties) to a dict, keeping AMQP types."""
    sections = split_sections(raw)
    return dict(sections[0].value or {})


def to_timestamp(epoch_seconds: float) -> timestamp:
    """An AMQP timestamp (milliseconds since the epoch)."""
    return timestamp(int(epoch_seconds * 1000))
