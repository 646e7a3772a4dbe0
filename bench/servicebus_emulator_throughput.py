"""Messages per second through the real azure-servicebus SDK against the local emulator.

Run with ``make bench-emulator`` (or ``python bench/servicebus_emulator_throughput.py --messages N``).
It starts the emulator on a free port, then measures, each in its own phase:

- send, one message per call;
- send, in batches of 100 (``ServiceBusMessageBatch``);
- receive in peek-lock (prefetch 100, up to 100 per call) without settling;
- complete of those messages;
- receive-and-delete.

and prints the rates and the emulator's resident memory at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

from servicebus_emulator.launcher import connection_string, free_port, launch

QUEUE = "bench"


def write_config(directory: Path) -> Path:
    path = directory / "Config.json"
    queue = {
        "Name": QUEUE,
        "Properties": {"LockDuration": "PT5M", "MaxDeliveryCount": 10, "DefaultMessageTimeToLive": "PT1H"},
    }
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [queue]}]}}))
    return path


def timed(label: str, count: int, action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    elapsed = time.perf_counter() - start
    rate = count / elapsed
    print(f"{label:<34} {count:>7} msgs {elapsed:>7.2f} s {rate:>9.0f} msgs/s")
    return rate


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=5000, help="messages per phase (default 5000)")
    parser.add_argument("--body-bytes", type=int, default=256, help="body size (default 256)")
    args = parser.parse_args()
    n = args.messages
    body = b"x" * args.body_bytes

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        process = launch(write_config(Path(tmp)), port)
        try:
            with ServiceBusClient.from_connection_string(connection_string(port)) as client:
                sender = client.get_queue_sender(QUEUE)
                with sender:
                    single = min(n, 1000)
                    timed(
                        "send (one per call)",
                        single,
                        lambda: [sender.send_messages(ServiceBusMessage(body)) for _ in range(single)],
                    )

                    def send_batches() -> None:
                        for start in range(0, n, 100):
                            batch = sender.create_message_batch()
                            for _ in range(min(100, n - start)):
                                batch.add_message(ServiceBusMessage(body))
                            sender.send_messages(batch)

                    timed("send (batches of 100)", n, send_batches)
                total = single + n
                received: list = []
                receiver = client.get_queue_receiver(QUEUE, prefetch_count=100)
                with receiver:

                    def receive_all() -> None:
                        while len(received) < total:
                            received.extend(receiver.receive_messages(max_message_count=100, max_wait_time=5))

                    timed("receive (peek-lock, prefetch 100)", total, receive_all)
                    timed("complete", total, lambda: [receiver.complete_message(m) for m in received])

                with client.get_queue_sender(QUEUE) as refill:
                    for start in range(0, n, 100):
                        refill.send_messages([ServiceBusMessage(body) for _ in range(min(100, n - start))])
                deleting = client.get_queue_receiver(
                    QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, prefetch_count=100
                )
                with deleting:
                    got = 0

                    def drain() -> None:
                        nonlocal got
                        while got < n:
                            got += len(deleting.receive_messages(max_message_count=100, max_wait_time=5))

                    timed("receive-and-delete (prefetch 100)", n, drain)
            print(f"emulator resident memory after the run: {rss_mib(process.pid):.1f} MiB")
        finally:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(10)


if __name__ == "__main__":
    main()
