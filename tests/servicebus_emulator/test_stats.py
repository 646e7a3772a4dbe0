"""The emulator's operation counts: every client operation, per queue, in its stats file.

The engine's sender adapter counts its own sends; both counts must agree on the same traffic.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from azure.servicebus import ServiceBusClient
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from pydantic import BaseModel

from adapters.servicebus import ServiceBusSender
from servicebus_emulator.launcher import connection_string, free_port, launch
from servicebus_emulator.stats import read_stats
from tests.servicebus_emulator.conftest import write_config
from tests.servicebus_emulator.helpers import receive_one
from tests.support import stop_process, wait_for


class Body(BaseModel):
    n: int


def test_every_operation_is_counted_per_queue_and_matches_the_senders_count(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", {"q": {}, "other": {}})
    stats_file = tmp_path / "stats.json"
    port = free_port()
    with (tmp_path / "emulator.log").open("wb") as log:
        process = launch(config, port, log=log, stats_file=stats_file)
    try:
        wait_for(stats_file.exists, what="the stats file")
        assert read_stats(stats_file) == {}
        client = ServiceBusClient.from_connection_string(connection_string(port))

        async def send_all() -> dict[str, dict[str, int]]:
            sender = ServiceBusSender(AsyncServiceBusClient.from_connection_string(connection_string(port)))
            try:
                for n in range(4):
                    await sender.send("q", Body(n=n), message_id=f"m{n}", correlation_id="c")
                await sender.send("other", Body(n=9), message_id="o", correlation_id="c")
                soon = datetime.now(UTC) + timedelta(milliseconds=200)
                await sender.send("q", Body(n=5), message_id="later", correlation_id="c", scheduled_at=soon)
                return sender.counts
            finally:
                await sender.close()

        sent = asyncio.run(send_all())
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            receiver.renew_message_lock(first)
            receiver.complete_message(first)
            second = receive_one(receiver)
            receiver.abandon_message(second)
            third = receive_one(receiver)  # the abandoned one again, or the next
            receiver.dead_letter_message(third, reason="test")
        expected = {
            "q": {
                "send": 4,
                "schedule": 1,
                "receive": 3,
                "renewLock": 1,
                "complete": 1,
                "abandon": 1,
                "deadLetter": 1,
            },
            "other": {"send": 1},
        }
        wait_for(lambda: read_stats(stats_file) == expected, what=f"counts {expected}")
        assert sent == {"q": {"send": 4, "schedule": 1}, "other": {"send": 1}}
        client.close()
    finally:
        stop_process(process)
    assert read_stats(stats_file) == expected  # written again at shutdown, unchanged
