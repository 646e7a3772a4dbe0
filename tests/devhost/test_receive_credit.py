"""How many messages a worker takes from a queue: prefetched ones count against maxConcurrentCalls."""

from __future__ import annotations

import uuid
from pathlib import Path

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage

from tests.devhost.conftest import WorkerFactory, toy_environment, wait_ready
from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, peek_all
from tests.support import wait_for

MAX_CONCURRENT_CALLS = 8  # the toy app's host.json; the worker asks for 2 messages at a time
SENT = 20


def test_messages_held_by_a_worker_never_exceed_max_concurrent_calls(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    # The `hold` function keeps every message until the release file exists, except the first one,
    # which returns at once and leaves an odd number of slots free. The worker receives with prefetch,
    # but asks the broker for another window of messages only when the window fits its free slots: it
    # never holds more than maxConcurrentCalls, and every message it took has been handed to the
    # function (none waits in its buffer). The rest stays on the queue for a competing receiver.
    release = tmp_path / "release"
    worker = worker_factory(
        toy_environment(toy_emulator, tmp_path, TOY_RELEASE_FILE=str(release)), http=False
    )
    wait_ready(worker)
    bodies = [f"quick-{uuid.uuid4()}"] + [f"hold-{uuid.uuid4()}" for _ in range(SENT - 1)]
    with client_for(toy_emulator) as client, client.get_queue_sender("hold") as sender:
        sender.send_messages([ServiceBusMessage(body) for body in bodies])
    wait_for(
        lambda: len(worker.records("hold")) >= MAX_CONCURRENT_CALLS,
        timeout=20,
        what="the worker to fill its slots",
    )

    with client_for(toy_emulator) as client, client.get_queue_receiver("hold") as receiver:
        taken: list[ServiceBusReceivedMessage] = []
        while batch := receiver.receive_messages(max_message_count=SENT, max_wait_time=2):
            taken.extend(batch)
        started = worker.records("hold")
        assert len(started) - 1 <= MAX_CONCURRENT_CALLS  # held now: all but the quick one
        assert len(taken) + len(started) == SENT, worker.log()
        release.touch()
        for message in taken:
            receiver.abandon_message(message)  # back to the queue, for the worker

    wait_for(
        lambda: {r["body"] for r in worker.records("hold")} >= set(bodies),
        timeout=30,
        what="the worker to process every message",
    )
    with client_for(toy_emulator) as client, client.get_queue_receiver("hold") as receiver:
        wait_for(lambda: peek_all(receiver) == [], timeout=10, what="every message to be completed")
