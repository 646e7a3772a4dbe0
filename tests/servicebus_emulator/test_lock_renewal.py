"""A receiver that sits idle while its locks run out, and an ``AutoLockRenewer`` renewing from several
threads, keep working as against Azure: the receiver is still open afterwards and settles what it holds.

The time scale is shortened (3 s locks instead of Azure's usual 30 s or more); the sleeps are the idle
program under test, not synchronisation.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from azure.servicebus import AutoLockRenewer, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import AutoLockRenewer as AsyncAutoLockRenewer
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import AutoLockRenewTimeout, MessageLockLostError

from tests.servicebus_emulator.conftest import EmulatorFactory
from tests.servicebus_emulator.helpers import client_for, receive_exactly, utc_now
from tests.servicebus_emulator.test_async import receive_exactly_async
from tests.support import wait_for

LOCK_SECONDS = 3  # the async renewer checks once a second, and needs a lock of some seconds to keep
QUEUE = {"q": {"LockDuration": f"PT{LOCK_SECONDS}S", "DeadLetteringOnMessageExpiration": True}}
COUNT = 10
# For the renewal-from-many-renewers tests: every lock must be renewed once within each lock duration,
# ten locks by several renewers over one connection. The SDK renews a short lock when three quarters of it
# are left, so the lock is the slack a late renewal has: 3 s, then 6 s, left too little on a loaded machine
# (a renewal came after its lock ran out, CI 2026-12-02).
RENEW_LOCK_SECONDS = 10
RENEW_QUEUE = {"q": {"LockDuration": f"PT{RENEW_LOCK_SECONDS}S"}}


def lock_expired(message: ServiceBusReceivedMessage) -> bool:
    return message.locked_until_utc is not None and message.locked_until_utc < utc_now()


def test_idle_receiver_with_an_expired_renewal_settles_the_rest(emulator_factory: EmulatorFactory) -> None:
    """One message renewed for a while, the program idle past that, then the prefetched rest settled."""
    running = emulator_factory(queues=QUEUE)
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"m{i}") for i in range(COUNT)])
        renewer = AutoLockRenewer()
        first_error: BaseException | None = None
        completed: list[int] = []
        lost_locally = 0
        with client.get_queue_receiver("q", max_wait_time=LOCK_SECONDS + 2, prefetch_count=COUNT) as receiver:
            for message in receiver:
                if first_error is None and not completed and lost_locally == 0:
                    renewer.register(receiver, message, max_lock_renewal_duration=LOCK_SECONDS)
                    time.sleep(LOCK_SECONDS * 2.5)  # idle: the renewal runs out, then the lock
                    wait_for(
                        lambda m=message: lock_expired(m), timeout=LOCK_SECONDS * 3, what="the lock to expire"
                    )
                    with pytest.raises(MessageLockLostError) as error:
                        receiver.complete_message(message)
                    first_error = error.value
                elif lock_expired(message):  # prefetched, its lock ran out in the buffer
                    with pytest.raises(MessageLockLostError):
                        receiver.complete_message(message)
                    lost_locally += 1
                else:
                    receiver.complete_message(message)
                    completed.append(message.sequence_number)
            left = receiver.peek_messages(max_message_count=COUNT, sequence_number=1)  # still open
        renewer.close()
    assert isinstance(first_error.inner_exception, AutoLockRenewTimeout)  # type: ignore[union-attr]
    assert sorted(completed) == list(range(1, COUNT + 1))  # each redelivered and completed once
    assert lost_locally >= 1
    assert left == []


def test_renewal_from_many_threads_keeps_the_receiver_open(emulator_factory: EmulatorFactory) -> None:
    """Eight renewer threads renew ten locks on one receiver at once, past several lock durations."""
    running = emulator_factory(queues=RENEW_QUEUE)
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}") for i in range(COUNT)])
        renewer = AutoLockRenewer(max_workers=8)
        with client.get_queue_receiver("q", prefetch_count=COUNT) as receiver:
            received = receive_exactly(receiver, COUNT)
            for message in received:
                renewer.register(receiver, message, max_lock_renewal_duration=RENEW_LOCK_SECONDS * 10)
            time.sleep(RENEW_LOCK_SECONDS * 2)  # idle while the renewer keeps every lock
            for message in received:
                assert message.auto_renew_error is None, repr(
                    getattr(message.auto_renew_error, "inner_exception", None)
                )
                receiver.complete_message(message)
            left = receiver.peek_messages(max_message_count=COUNT, sequence_number=1)
        renewer.close()
    assert left == []
    assert "sequencing error" not in running.log()


def test_renewal_from_many_tasks_keeps_the_receiver_open_async(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues=RENEW_QUEUE)

    async def scenario() -> list[Any]:
        async with AsyncServiceBusClient.from_connection_string(running.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages([ServiceBusMessage(f"{i}") for i in range(COUNT)])
            renewer = AsyncAutoLockRenewer()
            async with client.get_queue_receiver("q", prefetch_count=COUNT) as receiver:
                received = await receive_exactly_async(receiver, COUNT)
                for message in received:
                    renewer.register(receiver, message, max_lock_renewal_duration=RENEW_LOCK_SECONDS * 10)
                await asyncio.sleep(RENEW_LOCK_SECONDS * 2)
                for message in received:
                    assert message.auto_renew_error is None, repr(
                        getattr(message.auto_renew_error, "inner_exception", None)
                    )
                    await receiver.complete_message(message)
                left = await receiver.peek_messages(max_message_count=COUNT, sequence_number=1)
            await renewer.close()
        return left

    assert asyncio.run(scenario()) == []
