"""``$management`` requests answered as Service Bus answers them: a request for a message that is not
deferred fails as a whole, and every reply is correlated with its own request, also when many requests
are in flight on one receiver at once (ten threads, or ten tasks on one event loop).

The SDK retries a ``com.microsoft:message-not-found`` answer (with back-off) whatever the broker does, so
the clients that measure how fast the answer comes use ``retry_total=0``.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusError

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, receive_exactly
from tests.servicebus_emulator.test_async import receive_exactly_async

AT_ONCE = 1.0  # seconds
CONCURRENT = 10
ROUNDS = 5  # of ten at once: on one event loop the tasks interleave less than threads do


# ---- 5. a request for a message that is not deferred fails as a whole ---------------------------------
def test_receive_deferred_fails_whole_when_one_number_is_not_deferred(emulator: RunningEmulator) -> None:
    with client_for(emulator, retry_total=0) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(b"deferred"), ServiceBusMessage(b"active")])
        with client.get_queue_receiver("q", prefetch_count=1) as receiver:
            (first,) = receive_exactly(receiver, 1)
            receiver.defer_message(first)
            started = time.monotonic()
            with pytest.raises(ServiceBusError) as error:
                receiver.receive_deferred_messages([first.sequence_number, 2])  # 2 is active, not deferred
            took = time.monotonic() - started
            # Nothing was taken: the deferred message can still be received by its number.
            (again,) = receiver.receive_deferred_messages([first.sequence_number])
            receiver.complete_message(again)
    assert type(error.value) is MessageNotFoundError
    assert took < AT_ONCE
    assert again.sequence_number == first.sequence_number


def test_receive_deferred_fails_whole_when_one_number_is_not_deferred_async(
    emulator: RunningEmulator,
) -> None:
    async def scenario() -> tuple[BaseException, float, int]:
        client = AsyncServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)
        async with client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages([ServiceBusMessage(b"deferred"), ServiceBusMessage(b"active")])
            async with client.get_queue_receiver("q", prefetch_count=1) as receiver:
                (first,) = await receive_exactly_async(receiver, 1)
                await receiver.defer_message(first)
                started = time.monotonic()
                try:
                    await receiver.receive_deferred_messages([first.sequence_number, 99])
                except ServiceBusError as exc:
                    error: BaseException = exc
                    took = time.monotonic() - started
                else:
                    raise AssertionError("receive_deferred_messages returned the deferred message alone")
                (again,) = await receiver.receive_deferred_messages([first.sequence_number])
                await receiver.complete_message(again)
                return error, took, again.sequence_number

    error, took, number = asyncio.run(scenario())
    assert type(error) is MessageNotFoundError
    assert took < AT_ONCE
    assert number == 1


# ---- 5. every reply carries its own request's message-id as correlation-id ---------------------------
def send_numbered(running: RunningEmulator, count: int) -> None:
    with client_for(running) as client, client.get_queue_sender("q") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}".encode(), message_id=f"m{i}") for i in range(count)])


def test_concurrent_peeks_from_threads_each_get_their_own_answer(emulator: RunningEmulator) -> None:
    send_numbered(emulator, CONCURRENT)
    with client_for(emulator) as client, client.get_queue_receiver("q") as receiver:
        receiver.peek_messages(max_message_count=1)  # attach the management link before the race

        def peek(number: int) -> list[ServiceBusReceivedMessage]:
            return receiver.peek_messages(max_message_count=1, sequence_number=number)

        with ThreadPoolExecutor(CONCURRENT) as pool:
            answers = list(pool.map(peek, range(1, CONCURRENT + 1)))
    assert [[m.message_id for m in answer] for answer in answers] == [[f"m{i}"] for i in range(CONCURRENT)]


def test_concurrent_peeks_on_one_event_loop_each_get_their_own_answer(emulator: RunningEmulator) -> None:
    send_numbered(emulator, CONCURRENT)

    async def scenario() -> list[list[ServiceBusReceivedMessage]]:
        client = AsyncServiceBusClient.from_connection_string(emulator.connection_string)
        async with client, client.get_queue_receiver("q") as receiver:
            await receiver.peek_messages(max_message_count=1)
            answers = []
            for _ in range(ROUNDS):
                answers += await asyncio.gather(
                    *(
                        receiver.peek_messages(max_message_count=1, sequence_number=number)
                        for number in range(1, CONCURRENT + 1)
                    )
                )
            return answers

    answers = asyncio.run(scenario())
    expected = [[f"m{i}"] for i in range(CONCURRENT)] * ROUNDS
    assert [[m.message_id for m in answer] for answer in answers] == expected
