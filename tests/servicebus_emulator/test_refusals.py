"""What the emulator refuses, it refuses at once and as Azure does, so the SDK raises the same error.

Every case runs the real SDK, sync and async, against the emulator process, checks the exact exception
class, and checks that the SDK got it within a second: an error without all of its fields, or a transfer
left unsettled, shows as a send that hangs until the SDK's own timeout instead. Clients that measure time
are made with ``retry_total=0``, because the SDK retries some errors (with back-off) whatever the broker
does; the exception class is the same with or without retries. Their receivers are made with prefetch 1
and ``keep_alive=0``: otherwise the SDK runs a keep-alive thread that wakes once a second, and closing the
receiver after the error waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusError,
)

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.faulty_emulator import FAIL_ON_PEEK_FROM, FAIL_ON_SEND, FAIL_ON_SETTLE
from tests.servicebus_emulator.helpers import client_for, drain, receive_one

AT_ONCE = 1.0  # seconds: where Azure answers at once, so must the emulator
KIB = 1024
OVERSIZED = b"x" * (256 * KIB + 1)


def timed_failure(action: Callable[[], Any]) -> tuple[BaseException, float]:
    """Run ``action``, which must raise; return the exception and how long it took."""
    started = time.monotonic()
    try:
        action()
    except Exception as exc:
        return exc, time.monotonic() - started
    raise AssertionError("expected an exception, got none")


async def timed_failure_async(action: Callable[[], Awaitable[Any]]) -> tuple[BaseException, float]:
    """Await ``action()``, which must raise; return the exception and how long it took."""
    started = time.monotonic()
    try:
        await action()
    except Exception as exc:
        return exc, time.monotonic() - started
    raise AssertionError("expected an exception, got none")


def assert_fails_at_once(error: BaseException, took: float, expected: type[BaseException]) -> None:
    assert type(error) is expected, f"{type(error).__name__}: {error}"
    assert took < AT_ONCE, f"{type(error).__name__} took {took:.2f}s"


NO_KEEP_ALIVE: dict[str, Any] = {"prefetch_count": 1, "keep_alive": 0}


def still_serving(running: RunningEmulator) -> None:
    """The emulator is up and queue ``q`` works after the refusal."""
    with client_for(running) as client:
        with client.get_queue_sender("q", keep_alive=0) as sender:
            sender.send_messages(ServiceBusMessage(b"after", message_id="after"))
        with client.get_queue_receiver(
            "q", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            ids = [m.message_id for m in drain(receiver, idle=0.5, complete=False)]
    assert "after" in ids
    assert running.process.poll() is None


# ---- 1. a refused transfer fails the send at once ------------------------------------------------
def test_oversized_message_and_batch_fail_at_once(emulator: RunningEmulator) -> None:
    with client_for(emulator, retry_total=0) as client, client.get_queue_sender("q", keep_alive=0) as sender:
        sender.send_messages(ServiceBusMessage(b"warm-up"))  # the link is attached before timing
        error, took = timed_failure(lambda: sender.send_messages(ServiceBusMessage(OVERSIZED)))
        assert_fails_at_once(error, took, MessageSizeExceededError)
        halves = [ServiceBusMessage(b"y" * (130 * KIB)) for _ in range(2)]
        error, took = timed_failure(lambda: sender.send_messages(halves))
        assert_fails_at_once(error, took, MessageSizeExceededError)
        sender.send_messages(ServiceBusMessage(b"z" * (200 * KIB)))  # under the limit: accepted


def test_oversized_message_and_batch_fail_at_once_async(emulator: RunningEmulator) -> None:
    async def scenario() -> None:
        client = AsyncServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)
        async with client, client.get_queue_sender("q", keep_alive=0) as sender:
            await sender.send_messages(ServiceBusMessage(b"warm-up"))
            error, took = await timed_failure_async(
                lambda: sender.send_messages(ServiceBusMessage(OVERSIZED))
            )
            assert_fails_at_once(error, took, MessageSizeExceededError)
            halves = [ServiceBusMessage(b"y" * (130 * KIB)) for _ in range(2)]
            error, took = await timed_failure_async(lambda: sender.send_messages(halves))
            assert_fails_at_once(error, took, MessageSizeExceededError)

    asyncio.run(scenario())


# ---- 3. an error inside the emulator still settles the transfer or answers the request ----------
def test_a_fault_while_enqueueing_rejects_the_send_at_once(faulty_emulator: RunningEmulator) -> None:
    with (
        client_for(faulty_emulator, retry_total=0) as client,
        client.get_queue_sender("q", keep_alive=0) as sender,
    ):
        sender.send_messages(ServiceBusMessage(b"warm-up"))
        poisoned = ServiceBusMessage(b"boom", message_id=FAIL_ON_SEND)
        error, took = timed_failure(lambda: sender.send_messages(poisoned))
    assert_fails_at_once(error, took, ServiceBusError)
    assert "amqp:internal-error" in str(error)
    log = faulty_emulator.log()
    assert "failed to handle a transfer" in log and "PlantedFault: planted fault in send" in log


def test_a_fault_while_enqueueing_rejects_the_send_at_once_async(faulty_emulator: RunningEmulator) -> None:
    async def scenario() -> tuple[BaseException, float]:
        client = AsyncServiceBusClient.from_connection_string(
            faulty_emulator.connection_string, retry_total=0
        )
        async with client, client.get_queue_sender("q", keep_alive=0) as sender:
            await sender.send_messages(ServiceBusMessage(b"warm-up"))
            poisoned = ServiceBusMessage(b"boom", message_id=FAIL_ON_SEND)
            return await timed_failure_async(lambda: sender.send_messages(poisoned))

    error, took = asyncio.run(scenario())
    assert_fails_at_once(error, took, ServiceBusError)
    still_serving(faulty_emulator)


def test_a_fault_in_a_management_operation_answers_500_at_once(faulty_emulator: RunningEmulator) -> None:
    with (
        client_for(faulty_emulator, retry_total=0) as client,
        client.get_queue_receiver("q", **NO_KEEP_ALIVE) as receiver,
    ):
        assert receiver.peek_messages(max_message_count=1) == []  # the management link is attached
        error, took = timed_failure(lambda: receiver.peek_messages(sequence_number=FAIL_ON_PEEK_FROM))
    assert_fails_at_once(error, took, ServiceBusError)
    assert "planted fault in peek" in str(error)
    assert "PlantedFault" in faulty_emulator.log()


def test_a_fault_in_a_management_operation_answers_500_at_once_async(
    faulty_emulator: RunningEmulator,
) -> None:
    async def scenario() -> tuple[BaseException, float]:
        client = AsyncServiceBusClient.from_connection_string(
            faulty_emulator.connection_string, retry_total=0
        )
        async with client, client.get_queue_receiver("q", **NO_KEEP_ALIVE) as receiver:
            assert await receiver.peek_messages(max_message_count=1) == []
            return await timed_failure_async(
                lambda: receiver.peek_messages(sequence_number=FAIL_ON_PEEK_FROM)
            )

    error, took = asyncio.run(scenario())
    assert_fails_at_once(error, took, ServiceBusError)
    still_serving(faulty_emulator)


def test_a_fault_while_settling_answers_the_receiver_at_once(faulty_emulator: RunningEmulator) -> None:
    with client_for(faulty_emulator, retry_total=0) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"x", message_id=FAIL_ON_SETTLE))
        with client.get_queue_receiver("q", **NO_KEEP_ALIVE) as receiver:
            message = receive_one(receiver)
            error, took = timed_failure(lambda: receiver.complete_message(message))
    assert isinstance(error, ServiceBusError), f"{type(error).__name__}: {error}"
    assert took < AT_ONCE, f"{type(error).__name__} took {took:.2f}s"
    assert "failed to apply a settlement" in faulty_emulator.log()


# ---- 7. what the emulator lacks is refused ----------------------------------------------------------
def test_a_session_receiver_is_refused_at_attach(emulator: RunningEmulator) -> None:
    with client_for(emulator, retry_total=0) as client:
        receiver = client.get_queue_receiver("q", session_id="s-1", **NO_KEEP_ALIVE)
        error, took = timed_failure(lambda: receiver.receive_messages(max_wait_time=5))
        receiver.close()
    assert_fails_at_once(error, took, ServiceBusError)
    assert "does not use sessions" in str(error)
    still_serving(emulator)


def test_a_session_receiver_is_refused_at_attach_async(emulator: RunningEmulator) -> None:
    async def scenario() -> tuple[BaseException, float]:
        client = AsyncServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)
        async with client:
            receiver = client.get_queue_receiver("q", session_id="s-1", **NO_KEEP_ALIVE)
            try:
                return await timed_failure_async(lambda: receiver.receive_messages(max_wait_time=5))
            finally:
                await receiver.close()

    error, took = asyncio.run(scenario())
    assert_fails_at_once(error, took, ServiceBusError)
    assert "does not use sessions" in str(error)


@pytest.mark.parametrize("side", ["sender", "receiver"])
def test_an_unknown_queue_fails_at_token_time(emulator: RunningEmulator, side: str) -> None:
    def use(client: ServiceBusClient) -> None:
        if side == "sender":
            with client.get_queue_sender("no-such-queue") as sender:
                sender.send_messages(ServiceBusMessage(b"lost"))
        else:
            with client.get_queue_receiver("no-such-queue", **NO_KEEP_ALIVE) as receiver:
                receiver.receive_messages(max_wait_time=5)

    with client_for(emulator, retry_total=0) as client:
        error, took = timed_failure(lambda: use(client))
    assert_fails_at_once(error, took, ServiceBusAuthenticationError)
    assert "Status code: 404" in str(error.inner_exception)  # type: ignore[attr-defined]
    assert "could not be found" in str(error.inner_exception)  # type: ignore[attr-defined]
    assert "refused a token for" in emulator.log()


def test_an_unknown_queue_fails_at_token_time_async(emulator: RunningEmulator) -> None:
    async def scenario() -> tuple[BaseException, float]:
        client = AsyncServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)
        async with client:

            async def send() -> None:
                async with client.get_queue_sender("no-such-queue", keep_alive=0) as sender:
                    await sender.send_messages(ServiceBusMessage(b"lost"))

            return await timed_failure_async(send)

    error, took = asyncio.run(scenario())
    assert_fails_at_once(error, took, ServiceBusAuthenticationError)
    still_serving(emulator)
