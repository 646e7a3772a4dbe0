"""The asyncio client (azure.servicebus.aio) against the emulator: send forms, receive modes, settlement."""

from __future__ import annotations

import asyncio
from typing import Any

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import body_bytes


async def receive_exactly_async(
    receiver: ServiceBusReceiver, count: int, timeout: float = 10.0
) -> list[ServiceBusReceivedMessage]:
    """Receive until ``count`` messages have arrived; fail if they do not come within ``timeout``."""
    received: list[ServiceBusReceivedMessage] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(received) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"received {len(received)} of {count} messages within {timeout}s")
        received.extend(
            await receiver.receive_messages(
                max_message_count=count - len(received), max_wait_time=min(remaining, 5)
            )
        )
    return received


def test_async_send_single_list_and_batch(emulator: RunningEmulator) -> None:
    async def scenario() -> dict[str, Any]:
        async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages(ServiceBusMessage(b"single", message_id="s"))
                await sender.send_messages([ServiceBusMessage(b"list-1"), ServiceBusMessage(b"list-2")])
                batch = await sender.create_message_batch()
                batch.add_message(ServiceBusMessage(b"batch-1"))
                batch.add_message(ServiceBusMessage(b"batch-2"))
                await sender.send_messages(batch)
            async with client.get_queue_receiver("q") as receiver:
                received = await receive_exactly_async(receiver, 5)
                for message in received:
                    await receiver.complete_message(message)
                after = await receiver.peek_messages(max_message_count=10, sequence_number=1)
        return {"received": received, "after": after}

    result = asyncio.run(scenario())
    received = result["received"]
    assert [body_bytes(m) for m in received] == [b"single", b"list-1", b"list-2", b"batch-1", b"batch-2"]
    assert [m.sequence_number for m in received] == [1, 2, 3, 4, 5]
    assert received[0].message_id == "s"
    assert result["after"] == []


def test_async_receive_and_delete(emulator: RunningEmulator) -> None:
    async def scenario() -> dict[str, Any]:
        async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages(
                    [ServiceBusMessage(b"1", message_id="one"), ServiceBusMessage(b"2")]
                )
            async with client.get_queue_receiver(
                "q", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as receiver:
                before = await receiver.peek_messages(max_message_count=10, sequence_number=1)
                received = await receive_exactly_async(receiver, 2)
                after = await receiver.peek_messages(max_message_count=10, sequence_number=1)
        return {"before": before, "received": received, "after": after}

    result = asyncio.run(scenario())
    assert len(result["before"]) == 2
    assert [body_bytes(m) for m in result["received"]] == [b"1", b"2"]
    assert result["after"] == []


def test_async_abandon_dead_letter_and_dead_letter_queue(emulator: RunningEmulator) -> None:
    async def scenario() -> dict[str, Any]:
        async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages(ServiceBusMessage(b"bad", message_id="bad"))
            async with client.get_queue_receiver("q") as receiver:
                (first,) = await receive_exactly_async(receiver, 1)
                first_count = first.delivery_count
                await receiver.abandon_message(first)
                (again,) = await receive_exactly_async(receiver, 1)
                again_count = again.delivery_count
                await receiver.dead_letter_message(
                    again, reason="Invalid", error_description="no customer id"
                )
                main_after = await receiver.peek_messages(max_message_count=10, sequence_number=1)
            async with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
                (dead,) = await receive_exactly_async(dlq, 1)
                await dlq.complete_message(dead)
                dlq_after = await dlq.peek_messages(max_message_count=10, sequence_number=1)
        return {
            "counts": (first_count, again_count),
            "dead": dead,
            "main_after": main_after,
            "dlq_after": dlq_after,
        }

    result = asyncio.run(scenario())
    assert result["counts"] == (0, 1)
    dead = result["dead"]
    assert dead.message_id == "bad"
    assert dead.dead_letter_reason == "Invalid"
    assert dead.dead_letter_error_description == "no customer id"
    assert result["main_after"] == []
    assert result["dlq_after"] == []
