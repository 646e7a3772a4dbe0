"""Worker start, stop and failure: graceful SIGTERM, clear errors on bad settings, broker restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator.launcher import connection_string, free_port, launch
from tests.devhost.conftest import TOY_QUEUES, WorkerFactory, toy_environment, wait_ready
from tests.servicebus_emulator.conftest import RunningEmulator, write_config
from tests.servicebus_emulator.helpers import client_for, peek_all, receive_one
from tests.support import stop_process, wait_for


def test_sigterm_lets_an_in_flight_request_finish_and_exits_0(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    worker = worker_factory(toy_environment(toy_emulator, tmp_path))
    wait_ready(worker)
    responses: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: responses.append(httpx.get(worker.url("/api/slow?seconds=1.5"), timeout=10))
    )
    request.start()
    wait_for(lambda: worker.records("slow_http"), timeout=10, what="the slow request to start")

    os.kill(worker.process.pid, signal.SIGTERM)
    request.join(10)

    assert worker.process.wait(15) == 0, worker.log()
    assert [r.status_code for r in responses] == [200]
    assert responses[0].text == "done"
    assert "received SIGTERM: stopping" in worker.log()


def test_sigterm_lets_an_in_flight_message_finish_and_be_completed(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    worker = worker_factory(toy_environment(toy_emulator, tmp_path, TOY_SLOW_SECONDS="2"), http=False)
    wait_ready(worker)
    with client_for(toy_emulator) as client, client.get_queue_sender("slow") as sender:
        sender.send_messages(ServiceBusMessage(b"finish me"))
    wait_for(lambda: worker.records("slow"), timeout=10, what="the slow message to start")

    os.kill(worker.process.pid, signal.SIGTERM)

    assert worker.process.wait(15) == 0, worker.log()
    assert [r["event"] for r in worker.records("slow")] == ["started", "finished"]
    with client_for(toy_emulator) as client, client.get_queue_receiver("slow") as receiver:
        assert peek_all(receiver) == []


def test_lock_renewal_stops_at_max_auto_lock_renewal_duration(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    # Renewal is capped at 1 s (app-setting override of host.json) on a 2 s lock, and the function takes
    # 4 s: the lock runs out, the message is delivered again, and the first invocation cannot complete it.
    env = toy_environment(
        toy_emulator,
        tmp_path,
        TOY_SLOW_SECONDS="4",
        AzureFunctionsJobHost__extensions__serviceBus__maxAutoLockRenewalDuration="00:00:01",
    )
    worker = worker_factory(env, http=False, extra_args=("--shutdown-timeout", "1"))
    wait_ready(worker)
    with client_for(toy_emulator) as client, client.get_queue_sender("slow") as sender:
        sender.send_messages(ServiceBusMessage(b"outlives its lock", message_id="capped"))

    wait_for(
        lambda: (
            [r["delivery_count"] for r in worker.records("slow") if r["event"] == "started"][:2] == [0, 1]
        ),
        timeout=15,
        what="a second delivery after the lock ran out",
    )
    wait_for(lambda: "could not complete message capped" in worker.log(), timeout=15, what="the lost lock")

    # An invocation outlives the 1 s shutdown bound: the worker still exits 0, without waiting for it.
    assert stop_process(worker.process) == 0
    assert "still running" in worker.log()
    # Take the message off the queue (once its lock expires) for the tests that follow.
    with client_for(toy_emulator) as client, client.get_queue_receiver("slow") as receiver:
        leftover = receive_one(receiver, timeout=15)
        receiver.complete_message(leftover)
    assert leftover.message_id == "capped"


def test_sigint_also_stops_cleanly(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    worker = worker_factory(toy_environment(toy_emulator, tmp_path))
    wait_ready(worker)
    assert httpx.get(worker.url("/api/echo/x")).status_code == 200

    os.kill(worker.process.pid, signal.SIGINT)

    assert worker.process.wait(15) == 0, worker.log()


def test_sigterm_is_prompt_while_the_broker_is_unreachable(
    worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    # Nothing listens on this port: every receiver is inside the SDK's connect retries.
    unreachable = connection_string(free_port())
    worker = worker_factory(toy_environment(None, tmp_path, ServiceBusConnection=unreachable), http=False)
    wait_ready(worker)

    started = time.monotonic()
    os.kill(worker.process.pid, signal.SIGTERM)

    assert worker.process.wait(15) == 0, worker.log()
    assert time.monotonic() - started < 5, worker.log()


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("ServiceBusConnection", "connection app setting 'ServiceBusConnection' is not set"),
        ("QUEUE_FROM_SETTING", "refers to app setting(s) that are not set: QUEUE_FROM_SETTING"),
        ("TOY_SCHEDULE", "refers to app setting(s) that are not set: TOY_SCHEDULE"),
    ],
)
def test_a_missing_setting_stops_the_start_with_a_clear_message(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path, missing: str, expected: str
) -> None:
    worker = worker_factory(toy_environment(toy_emulator, tmp_path, **{missing: None}))

    assert worker.process.wait(20) == 2
    assert expected in worker.log()
    assert "cannot start" in worker.log()


def test_a_malformed_connection_string_stops_the_start(worker_factory: WorkerFactory, tmp_path: Path) -> None:
    worker = worker_factory(toy_environment(None, tmp_path, ServiceBusConnection="not a connection string"))

    assert worker.process.wait(20) == 2
    assert "is not a Service Bus connection string" in worker.log()


def test_an_app_that_fails_to_import_exits_1_with_the_traceback(
    worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    app_dir = tmp_path / "broken_app"
    app_dir.mkdir()
    (app_dir / "function_app.py").write_text("raise ImportError('no such thing')\n", encoding="utf-8")

    worker = worker_factory(toy_environment(None, tmp_path), app_dir=app_dir, http=False)

    assert worker.process.wait(20) == 1
    assert "ImportError: no such thing" in worker.log()


def test_a_busy_http_port_stops_the_start(
    toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    first = worker_factory(toy_environment(toy_emulator, tmp_path / "first"))
    wait_ready(first)
    assert first.http_port is not None
    second = worker_factory(
        toy_environment(toy_emulator, tmp_path / "second"),
        http=False,
        extra_args=("--http-port", str(first.http_port)),
    )

    assert second.process.wait(20) == 2
    assert f"cannot listen for HTTP on 127.0.0.1:{first.http_port}" in second.log()


def test_the_worker_reconnects_after_the_broker_restarts(
    worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "config.json", TOY_QUEUES)
    port = free_port()

    def start_broker(index: int) -> subprocess.Popen[bytes]:
        with (tmp_path / f"emulator-{index}.log").open("wb") as log:
            return launch(config, port, log=log)

    broker = start_broker(0)
    try:
        running = RunningEmulator(broker, port, connection_string(port), tmp_path / "emulator-0.log")
        worker = worker_factory(toy_environment(running, tmp_path), http=False)
        wait_ready(worker)
        with client_for(running) as client, client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage(b"before", message_id="before"))
        wait_for(lambda: worker.records("work"), timeout=10, what="the first message")

        assert stop_process(broker) == 0
        wait_for(lambda: "reconnecting in" in worker.log(), timeout=15, what="the worker to notice")
        broker = start_broker(1)

        with client_for(running) as client, client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage(b"after", message_id="after"))
        wait_for(
            lambda: [r["message_id"] for r in worker.records("work")] == ["before", "after"],
            timeout=30,
            what="the message sent after the restart",
        )
        assert worker.process.poll() is None
        assert "reconnected" in worker.log()
    finally:
        stop_process(broker)


def test_the_worker_module_runs_as_a_script_with_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devhost.worker", "--help"], capture_output=True, text=True, timeout=30
    )

    assert result.returncode == 0
    for flag in ("--app-dir", "--worker-id", "--http-port", "--log-level"):
        assert flag in result.stdout
