"""Peek-lock locks: expiry and redelivery, a receiver process that dies, and renewing a lock."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import IO

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError

from tests.servicebus_emulator.conftest import EmulatorFactory
from tests.servicebus_emulator.helpers import client_for, peek_all, receive_one, utc_now

SHORT_LOCK = {"LockDuration": "PT2S"}

# Receives one message in PEEK_LOCK, reports it on stdout, then blocks without settling it.
CHILD_RECEIVER = """
import sys, threading
from azure.servicebus import ServiceBusClient

client = ServiceBusClient.from_connection_string(sys.argv[1])
receiver = client.get_queue_receiver(sys.argv[2])
messages = []
while not messages:
    messages = receiver.receive_messages(max_message_count=1, max_wait_time=5)
print("received", messages[0].message_id, messages[0].delivery_count, flush=True)
threading.Event().wait()
"""


def readline_within(stream: IO[bytes], timeout: float) -> str:
    """Read one line from a child's pipe, failing the test if none comes within ``timeout`` seconds."""
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).decode()
    except queue.Empty:
        raise AssertionError(f"no line from the child process within {timeout}s") from None


def test_lock_expiry_redelivers_with_new_lock(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": SHORT_LOCK})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"slow", message_id="slow"))
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            received_at = utc_now()
            first_lock, first_until = first.lock_token, first.locked_until_utc
            # Not settled: once the 2 s lock expires the message is handed out again.
            again = receive_one(receiver, timeout=8)
            redelivered_at = utc_now()
            again_lock = again.lock_token  # the SDK reports None once a message is settled

            # The old lock is gone: the SDK refuses to settle with it, and so does the broker when asked
            # to renew it (renewal is not short-circuited by the SDK's own clock check).
            with pytest.raises(ServiceBusError):
                receiver.complete_message(first)
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(first)

            receiver.complete_message(again)
            remaining = peek_all(receiver)

    assert first.delivery_count == 0
    assert first_until is not None
    assert abs((first_until - (received_at + timedelta(seconds=2))).total_seconds()) < 1.5
    assert redelivered_at >= first_until - timedelta(milliseconds=100)
    assert again.message_id == "slow"
    assert again.sequence_number == first.sequence_number
    assert again.delivery_count == 1
    assert again_lock is not None and first_lock is not None
    assert again_lock != first_lock
    assert remaining == []


def test_lock_expires_after_receiver_process_is_killed(
    emulator_factory: EmulatorFactory, tmp_path: Path
) -> None:
    running = emulator_factory(queues={"q": SHORT_LOCK})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"orphan", message_id="orphan"))

        child_errors = tmp_path / "child-stderr.txt"
        with child_errors.open("wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD_RECEIVER, running.connection_string, "q"],
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        try:
            assert child.stdout is not None
            line = readline_within(child.stdout, timeout=30)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            if child.stdout is not None:
                child.stdout.close()
        assert line.split() == ["received", "orphan", "0"], child_errors.read_text(errors="replace")
        assert child.returncode == -signal.SIGKILL

        with client.get_queue_receiver("q") as receiver:
            message = receive_one(receiver, timeout=8)
            receiver.complete_message(message)
            remaining = peek_all(receiver)

    assert message.message_id == "orphan"
    assert message.delivery_count == 1
    assert remaining == []


def test_renew_lock_keeps_message_from_other_receivers(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": SHORT_LOCK})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"long job", message_id="job"))
        with client.get_queue_receiver("q") as holder, client.get_queue_receiver("q") as other:
            message = receive_one(holder)
            original_until = message.locked_until_utc
            assert original_until is not None
            assert other.receive_messages(max_message_count=1, max_wait_time=1) == []

            renewed_until = holder.renew_message_lock(message)
            # Past the original lock's expiry, the renewed lock still keeps the message from others.
            during_renewal = other.receive_messages(max_message_count=1, max_wait_time=1.5)
            checked_at = utc_now()
            renewed_again = holder.renew_message_lock(message)
            holder.complete_message(message)
            remaining = peek_all(holder)

    assert renewed_until > original_until
    assert checked_at > original_until, "the check must run after the original lock would have expired"
    assert during_renewal == []
    assert renewed_again > renewed_until
    assert remaining == []
