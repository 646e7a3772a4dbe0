"""Message sections: what the broker keeps and what it sends back, checked with the SDK's own decoder."""

from __future__ import annotations

import pytest
from azure.servicebus._pyamqp._decode import decode_payload
from proton import Data, Message, symbol

from servicebus_emulator.codec import MessageFormatError, encode_delivery, parse_message, split_batch


def data_section(payload: bytes) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(0x75)
    data.put_binary(payload)
    data.exit()
    return bytes(data.encode())


def encoded(body: object, **kwargs: object) -> bytes:
    return bytes(Message(body=body, **kwargs).encode())


def test_bare_message_round_trips_and_header_always_carries_the_delivery_count() -> None:
    original = encoded(
        b"\xff\x00binary",
        id="m-1",
        correlation_id="c-1",
        reply_to="replies",
        subject="subject",
        content_type="application/json",
        properties={"text": "v", "number": 7, "flag": True},
        ttl=30,
    )
    sections = parse_message(original)
    out = encode_delivery(sections, delivery_count=0, annotations={"x-opt-sequence-number": 5})
    decoded = decode_payload(memoryview(out))
    assert decoded.header.delivery_count == 0  # present, not None
    assert decoded.header.ttl == 30_000
    assert decoded.message_annotations[b"x-opt-sequence-number"] == 5
    assert decoded.properties.message_id == b"m-1"
    assert decoded.properties.reply_to == b"replies"
    assert decoded.application_properties == {b"text": b"v", b"number": 7, b"flag": True}
    assert decoded.value == b"\xff\x00binary"
    # The bare message (everything after header and annotations) is the sender's bytes, unchanged.
    assert out.endswith(original[original.index(b"\x00Ss") :])


def test_dead_letter_properties_are_merged_into_application_properties() -> None:
    sections = parse_message(encoded("x", properties={"keep": 1}))
    out = encode_delivery(
        sections, delivery_count=3, annotations={}, application_properties={"DeadLetterReason": "why"}
    )
    decoded = decode_payload(memoryview(out))
    assert decoded.header.delivery_count == 3
    assert decoded.application_properties == {b"keep": 1, b"DeadLetterReason": b"why"}


def test_sender_annotations_are_kept_and_broker_annotations_win() -> None:
    sections = parse_message(
        encoded("x", annotations={symbol("x-opt-partition-key"): "p", symbol("x-opt-sequence-number"): 99})
    )
    decoded = decode_payload(
        memoryview(encode_delivery(sections, delivery_count=0, annotations={"x-opt-sequence-number": 1}))
    )
    assert decoded.message_annotations[b"x-opt-partition-key"] == b"p"
    assert decoded.message_annotations[b"x-opt-sequence-number"] == 1


def test_a_batch_is_split_into_its_messages() -> None:
    inner = [encoded(f"m{i}", id=f"id-{i}") for i in range(3)]
    batch = b"".join(data_section(m) for m in inner)
    parts = split_batch(batch)
    assert parts == inner
    assert [parse_message(p).message_id for p in parts] == ["id-0", "id-1", "id-2"]


def test_a_message_with_a_data_body_is_not_a_batch() -> None:
    assert split_batch(encoded("not a batch")) is None
    assert split_batch(data_section(b'{"json": true}')) is None
    assert split_batch(data_section(b"\x00S")) is None


@pytest.mark.parametrize("raw", [b"", b"\x00", b"garbage bytes", bytes(Message(body=None).encode())[:3]])
def test_garbage_is_refused(raw: bytes) -> None:
    with pytest.raises(MessageFormatError):
        parse_message(raw)
