"""The delivery-id renumbering between the socket and proton, on hand-built AMQP frames.

A client whose threads race can send delivery-ids twice or out of order; proton must see them in
sequence, and the client must see its own ids in the dispositions that answer them.
"""

from __future__ import annotations

import struct

from proton import Data

from servicebus_emulator.wire import Renumberer

CLIENT_CHANNEL = 3
OUR_CHANNEL = 0


def uint(value: int) -> bytes:
    return b"\x70" + struct.pack(">I", value)


def frame(channel: int, code: int, fields: list[bytes], payload: bytes = b"") -> bytes:
    elements = b"".join(fields)
    body = bytes((0x00, 0x53, code, 0xC0, len(elements) + 1, len(fields))) + elements + payload
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def begin(channel: int, remote_channel: bytes, next_outgoing_id: int) -> bytes:
    return frame(channel, 0x11, [remote_channel, uint(next_outgoing_id), uint(100), uint(100)])


def transfer(delivery_id: int | None, *, more: bool = False, payload: bytes = b"\x00Sw\xa1\x01x") -> bytes:
    fields = [
        b"\x43",  # handle 0
        b"\x40" if delivery_id is None else b"\x52" + bytes([delivery_id]),  # smalluint, as clients send it
        b"\xa0\x04" + struct.pack(">I", delivery_id or 0),
        b"\x43",
        b"\x42",  # settled: false
        b"\x41" if more else b"\x42",
    ]
    return frame(CLIENT_CHANNEL, 0x14, fields, payload)


def disposition(first: int, last: int | None = None) -> bytes:
    accepted = b"\x00\x53\x24\x45"
    fields = [b"\x41", uint(first), b"\x40" if last is None else uint(last), b"\x41", accepted]
    return frame(OUR_CHANNEL, 0x15, fields)


def frames(raw: bytes) -> list[tuple[int, list[object]]]:
    """(performative code, decoded fields) of each frame, decoded with proton."""
    out = []
    pos = 0
    while pos < len(raw):
        if raw[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        size, doff = struct.unpack_from(">IB", raw, pos)
        data = Data()
        data.decode(raw[pos + doff * 4 : pos + size])
        data.rewind()
        data.next()
        described = data.get_object()
        out.append((int(described.descriptor), list(described.value)))
        pos += size
    return out


def delivery_ids(raw: bytes) -> list[int]:
    return [int(fields[1]) for code, fields in frames(raw) if code == 0x14]  # type: ignore[call-overload]


def opened() -> Renumberer:
    wire = Renumberer()
    assert wire.incoming(b"AMQP\x00\x01\x00\x00" + begin(CLIENT_CHANNEL, b"\x40", 4)) != b""
    reply = begin(OUR_CHANNEL, b"\x60" + struct.pack(">H", CLIENT_CHANNEL), 0)
    assert wire.outgoing(reply) == reply
    return wire


def test_transfers_in_sequence_pass_unchanged() -> None:
    wire = opened()
    raw = transfer(4) + transfer(5) + transfer(6)
    assert wire.incoming(raw) == raw
    out = disposition(4, 6)
    assert wire.outgoing(out) == out
    assert wire.renumbered == 0


def test_out_of_order_ids_reach_proton_in_sequence_and_answers_carry_the_clients_ids() -> None:
    wire = opened()
    assert delivery_ids(wire.incoming(transfer(5) + transfer(4))) == [4, 5]
    assert wire.renumbered == 2
    answer = wire.outgoing(disposition(4))  # proton's 4 is the client's 5
    ((code, fields),) = frames(answer)
    assert (code, fields[1], fields[2]) == (0x15, 5, 5)
    answer = wire.outgoing(disposition(5))
    assert [f[1] for _, f in frames(answer)] == [4]


def test_a_repeated_id_gets_the_next_number_and_later_ids_follow_on() -> None:
    wire = opened()
    assert delivery_ids(wire.incoming(transfer(4) + transfer(4) + transfer(5))) == [4, 5, 6]
    answer = wire.outgoing(disposition(4, 6))
    # The client's ids are 4, 4, 5: not a range, so one disposition each.
    assert [(f[1], f[2]) for _, f in frames(answer)] == [(4, 4), (4, 4), (5, 5)]
    assert all(f[3] is True for _, f in frames(answer))  # settled and outcome kept
    # Later transfers are renumbered too (the client's 6 is proton's 7), and answered with 6.
    assert delivery_ids(wire.incoming(transfer(6))) == [7]
    answer = wire.outgoing(disposition(7))
    assert [f[1] for _, f in frames(answer)] == [6]


def test_frames_split_across_reads_are_held_until_complete() -> None:
    wire = opened()
    raw = transfer(5, payload=b"\x00Sw\xb1" + struct.pack(">I", 3000) + b"y" * 3000) + transfer(4)
    pieces = [raw[:3], raw[3:20], raw[20:1000], raw[1000:]]
    out = b"".join(wire.incoming(piece) for piece in pieces)
    assert delivery_ids(out) == [4, 5]
    assert out.count(b"y" * 3000) == 1


def test_a_continued_transfer_keeps_its_number() -> None:
    wire = opened()
    raw = transfer(5, more=True) + transfer(None) + transfer(4)
    decoded = frames(wire.incoming(raw))
    assert [fields[1] for _, fields in decoded] == [4, None, 5]


def test_our_own_transfers_and_other_frames_are_not_decoded() -> None:
    wire = opened()
    ours = frame(OUR_CHANNEL, 0x14, [b"\x43", uint(9), b"\xa0\x01\x00"]) + struct.pack(">IBBH", 8, 2, 0, 0)
    assert wire.outgoing(ours) == ours


def test_a_frame_handed_out_in_parts_is_sent_whole() -> None:
    wire = opened()
    wire.incoming(transfer(5) + transfer(4))
    answer = disposition(4)
    assert wire.outgoing(answer[:-2]) == b""  # not whole yet: kept
    assert [f[1] for _, f in frames(wire.outgoing(answer[-2:]))] == [5]
