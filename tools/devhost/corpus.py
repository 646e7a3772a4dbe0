"""Compatibility corpora: what a release's own local stack holds mid-run, kept in the repository so that
every later release is tested on it (docs/upgrading.md, tests/e2e/test_corpus.py).

    python -m devhost.corpus capture 1.0.0 tests/compat/1.0.0   # at a release: its corpus

Capturing runs the release's own demo on its own code (devhost.releases) with long waits, hangs,
permanent faults, lost replies, callbacks and a short retention, so that its orders are in every state it
has: submitted, mid-step, waiting for an approval or a timer (parked), waiting for a callback, in a group,
compensating, in Error, finished in the history, purged (tombstoned). Then it freezes the function workers
(SIGSTOP: nothing moves while it looks), peeks every message the queues hold (active and scheduled) and
stops the stack, which saves Azurite's tables. The corpus is those tables and the simulators' ledger
(``data.tar.gz``), the messages of the engine's queues (``messages.json.gz``) and what this release read in
the tables (``manifest.json``: each order's state, and the tombstones).

Loading it (:func:`unpack`, then :func:`resend` once a stack runs on the folder) gives a data folder a
later release's stack starts on, and the queues their messages again (a scheduled one at its time, or at
once if that has passed). A message already handled before the freeze may come again: delivery is at least
once, and the engine is fenced against that.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from azure.data.tables.aio import TableServiceClient
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState

from adapters.table_store import TableStateStore
from devhost import azurite, releases
from engine import ProcessState, queues
from orders.catalog import CATALOG
from servicebus_emulator.launcher import connection_string, free_port

DATA = "data.tar.gz"
MESSAGES = "messages.json.gz"
MANIFEST = "manifest.json"
# What the corpus keeps of a data folder: the tables and the simulators' ledger.
KEPT = ("azurite", "simulators-ledger.journal")
# The demo's knobs: waits still running at the freeze (and long over when a test loads the corpus), faults
# and a budget that leave orders in every state a few seconds in (a hung step past its budget once: Error).
DEMO = (
    *("--orders", "300", "--window", "60", "--review", "60", "--park-horizon", "1"),
    *("--hang", "0.1", "--permanent", "0.06", "--lost-reply", "0.05", "--complete-by", "3", "--seed", "1"),
    *("--timeout", "3600"),
)
SETTINGS = {
    # Short enough that orders finished early in the run are purged (tombstoned) before it is frozen.
    "ORDER_RETENTION": "PT2S",
    "SUPERVISOR_MAX_FAILURES": "1",
}


def capture(version: str, out: Path, run_seconds: float = 8.0) -> dict[str, int]:
    """Run release ``version``'s demo for ``run_seconds``, freeze it and keep its corpus in ``out``; return
    how many messages each queue held."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        checkout = releases.checkout(version, Path(tmp) / "release")
        data_dir = Path(tmp) / "data"
        env = {**os.environ, "PYTHONPATH": releases.package_path(checkout), **SETTINGS}
        with (Path(tmp) / "demo.out").open("wb") as log:
            demo = subprocess.Popen(
                [sys.executable, "-m", "devhost.demo", *DEMO, "--data-dir", str(data_dir)],
                cwd=checkout,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            state = _ready(data_dir / "devhost.json", demo)
            time.sleep(run_seconds)  # the demo plays its orders meanwhile: the corpus is what it has then
            for worker in state["workers"]:
                os.kill(worker["pid"], signal.SIGSTOP)  # frozen: the tables and the queues stay as peeked
            held = _peek(state["servicebus"]["port"])
        finally:
            demo.send_signal(signal.SIGINT)  # the demo stops its stack: Azurite saves its tables on SIGINT
            demo.wait(120)
        manifest = asyncio.run(survey(data_dir))
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        with tarfile.open(out / DATA, "w:gz") as tar:
            for name in KEPT:
                tar.add(data_dir / name, arcname=name)
    with gzip.open(out / MESSAGES, "wt", encoding="utf-8") as file:
        json.dump(held, file, indent=1, sort_keys=True)
    counts: dict[str, int] = {}
    for message in held:
        counts[message["queue"]] = counts.get(message["queue"], 0) + 1
    return counts


async def survey(data_dir: Path) -> dict[str, Any]:
    """What a corpus's tables hold, read by this release's store: each order's state, what it waits for,
    whether it is parked, its steps' states; and the purged orders' tombstones."""
    port = free_port()
    process = azurite.launch(data_dir / "azurite", port)
    try:
        async with TableServiceClient.from_connection_string(
            azurite.table_connection_string(port)
        ) as service:
            store = await TableStateStore.from_service(service, "orders")
            found: dict[str, Any] = {}
            for state in ProcessState:
                token = None
                while True:
                    page = await store.list_by_state(state, 100, token)
                    for listed in page.states:
                        record = await store.load(listed.order_id)
                        assert record is not None, listed.order_id
                        found[listed.order_id] = {
                            "processState": record.state.process_state.value,
                            "workflow": f"{record.state.workflow}@{record.state.workflow_version}",
                            "waitingFor": record.state.waiting_for,
                            "parked": record.parked,
                            "steps": [step.status.value for step in record.steps],
                        }
                    if (token := page.continuation) is None:
                        break
            tombstones = [e["OrderID"] async for e in store._history().query_entities("Kind eq 'tombstone'")]
            await store.close()
        return {"orders": dict(sorted(found.items())), "tombstones": sorted(tombstones)}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def _ready(path: Path, demo: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            raise RuntimeError(f"the demo exited with {demo.returncode} before its stack was ready")
        if path.exists():
            state: dict[str, Any] = json.loads(path.read_text())
            if state.get("ready"):
                return state
        time.sleep(0.2)  # polling a file another process writes: nothing to wait on
    raise RuntimeError(f"the demo's stack was not ready within 180 s ({path})")


def _peek(port: int) -> list[dict[str, Any]]:
    """Every message of every queue, active or scheduled, as it would be sent again."""
    held = []
    with ServiceBusClient.from_connection_string(connection_string(port)) as client:
        # The engine's queues; the status queue is for the submitting application, which reads it.
        for queue in (queues.SCHEDULER_QUEUE, queues.REPLY_QUEUE, *map(queues.agent_queue, CATALOG.agents)):
            with client.get_queue_receiver(queue) as receiver:
                start = 0
                while batch := receiver.peek_messages(max_message_count=100, sequence_number=start):
                    for message in batch:
                        if message.state is ServiceBusMessageState.DEFERRED:
                            continue  # nothing here defers
                        scheduled = message.scheduled_enqueue_time_utc
                        held.append(
                            {
                                "queue": queue,
                                "body": b"".join(message.body).decode(),
                                "messageId": message.message_id,
                                "correlationId": message.correlation_id,
                                "replyTo": message.reply_to,
                                "subject": message.subject,
                                "properties": {
                                    str(k, "utf-8") if isinstance(k, bytes) else str(k): _text(v)
                                    for k, v in (message.application_properties or {}).items()
                                },
                                "scheduledAt": scheduled.isoformat()
                                if message.state is ServiceBusMessageState.SCHEDULED and scheduled
                                else None,
                            }
                        )
                    start = (batch[-1].sequence_number or 0) + 1
    return held


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def unpack(corpus: Path, data_dir: Path) -> None:
    """A data folder holding the corpus's tables and ledger, for a stack to start on."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(corpus / DATA) as tar:
        tar.extractall(data_dir, filter="data")


def messages(corpus: Path) -> list[dict[str, Any]]:
    with gzip.open(corpus / MESSAGES, "rt", encoding="utf-8") as file:
        return list(json.load(file))


def resend(corpus: Path, sb_port: int) -> int:
    """Send the corpus's messages to a running stack's queues again, one sender per queue; return how many."""
    held = messages(corpus)
    now = datetime.now(UTC)
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for message in held:
        by_queue.setdefault(message["queue"], []).append(message)
    with ServiceBusClient.from_connection_string(connection_string(sb_port)) as client:
        for queue, listed in by_queue.items():
            with client.get_queue_sender(queue) as sender:
                for message in listed:
                    body = ServiceBusMessage(
                        message["body"],
                        content_type="application/json",
                        message_id=message["messageId"],
                        correlation_id=message["correlationId"],
                        reply_to=message["replyTo"],
                        subject=message["subject"],
                        application_properties=message["properties"] or None,
                    )
                    at = datetime.fromisoformat(message["scheduledAt"]) if message["scheduledAt"] else None
                    if at is not None and at > now:
                        sender.schedule_messages(body, at)
                    else:
                        sender.send_messages(body)
    return len(held)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devhost.corpus", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    take = sub.add_parser("capture", help="capture a release's corpus")
    take.add_argument("version", choices=sorted(releases.RELEASES))
    take.add_argument("out", type=Path)
    take.add_argument("--seconds", type=float, default=8.0, help="how long the demo runs before the freeze")
    args = parser.parse_args(argv)
    counts = capture(args.version, args.out, args.seconds)
    print(f"corpus of {args.version} in {args.out}: messages {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
