"""One worker process serving the toy app against the real emulator: HTTP, Service Bus and timer triggers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from devhost.http_host import INTERNAL_ERROR_MESSAGE, MAX_REQUEST_BODY_BYTES
from tests.devhost.conftest import (
    SETTINGS_QUEUE,
    RunningWorker,
    start_worker,
    toy_environment,
    wait_ready,
)
from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, peek_all, receive_one
from tests.support import stop_process, wait_for


@pytest.fixture(scope="module")
def worker(
    toy_emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningWorker]:
    """The toy app in one worker, with HTTP, for every test in this module."""
    directory = tmp_path_factory.mktemp("worker")
    running = start_worker(toy_environment(toy_emulator, directory), directory / "worker.log")
    wait_ready(running)
    yield running
    assert stop_process(running.process) == 0, running.log()


def send(emulator: RunningEmulator, queue: str, *messages: ServiceBusMessage) -> None:
    """Send messages with the real SDK."""
    with client_for(emulator) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages(list(messages))


def queue_is_empty(emulator: RunningEmulator, queue: str) -> bool:
    """True if peeking the queue (locked messages included) finds nothing."""
    with client_for(emulator) as client, client.get_queue_receiver(queue) as receiver:
        return peek_all(receiver) == []


def records_with(worker: RunningWorker, name: str, key: str, value: object) -> list[dict[str, object]]:
    """The records of one toy function whose ``key`` equals ``value``."""
    return [record for record in worker.records(name) if record.get(key) == value]


# --- HTTP -------------------------------------------------------------------------------------------------


def test_http_get_passes_route_params_query_and_headers(worker: RunningWorker) -> None:
    response = httpx.get(worker.url("/api/echo/alice?x=1&y=two"), headers={"X-Toy": "hi"})

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-echoed"] == "yes"
    assert response.json() == {
        "method": "GET",
        "url": worker.url("/api/echo/alice?x=1&y=two"),
        "params": {"x": "1", "y": "two"},
        "route": {"name": "alice"},
        "body": "",
        "header": "hi",
    }


def test_http_post_passes_the_body_and_routes_ignore_case(worker: RunningWorker) -> None:
    response = httpx.post(worker.url("/API/Echo/bob"), content=b'{"order": 42}')

    assert response.status_code == 200
    echoed = response.json()
    assert echoed["method"] == "POST"
    assert echoed["route"] == {"name": "bob"}
    assert echoed["body"] == '{"order": 42}'


def test_http_unknown_route_is_404_json(worker: RunningWorker) -> None:
    for path in ("/api/nothing-here", "/api/echo", "/echo/alice", "/"):
        response = httpx.get(worker.url(path))
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "NotFound"


def test_a_body_over_the_cap_is_413_over_a_real_connection(worker: RunningWorker) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the host finds out as it reads
        for _ in range(1000):
            yield b"x" * (64 * 1024)

    with httpx.Client(timeout=10) as client:
        for body in (b"x" * (MAX_REQUEST_BODY_BYTES + 1), chunks()):
            refused = client.post(worker.url("/api/echo/big"), content=body)
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["code"] == "PayloadTooLarge"
        at_the_cap = client.post(worker.url("/api/echo/cap"), content=b"x" * MAX_REQUEST_BODY_BYTES)
        assert at_the_cap.status_code == 200 and len(at_the_cap.json()["body"]) == MAX_REQUEST_BODY_BYTES


def test_http_method_not_in_the_route_is_405(worker: RunningWorker) -> None:
    response = httpx.delete(worker.url("/api/echo/alice"))

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "MethodNotAllowed"
    assert response.headers["allow"] == "GET, POST"


def test_http_exception_is_500_json_and_the_worker_keeps_serving(worker: RunningWorker) -> None:
    failed = httpx.get(worker.url("/api/boom"))

    assert failed.status_code == 500
    error = failed.json()["error"]
    assert error["code"] == "InternalError"
    # The runtime's report of the exception goes to the log only: the client learns that it failed.
    assert error["message"] == INTERNAL_ERROR_MESSAGE and "boom" not in failed.text
    wait_for(lambda: "RuntimeError: boom on purpose" in worker.log(), timeout=5, what="the logged traceback")
    assert "ERROR devhost.functions: Executed 'Functions.boom' (Failed" in worker.log()

    after = httpx.get(worker.url("/api/echo/still-here"))
    assert after.status_code == 200
    assert after.json()["route"] == {"name": "still-here"}


def test_http_async_function_with_int_constraint_and_optional_parameter(worker: RunningWorker) -> None:
    assert httpx.get(worker.url("/api/items/12")).json() == {"id": "12"}
    assert httpx.get(worker.url("/api/items/12/red")).json() == {"id": "12", "tag": "red"}
    assert httpx.get(worker.url("/api/items/twelve")).status_code == 404


def test_http_string_result_and_context_argument(worker: RunningWorker) -> None:
    response = httpx.get(worker.url("/api/text"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.text == "hello from text"


def test_http_invocations_are_logged_at_debug_with_the_worker_id(worker: RunningWorker) -> None:
    httpx.get(worker.url("/api/echo/logged"))

    wait_for(
        lambda: (
            "[worker 1]" in worker.log()
            and "DEBUG devhost.functions: Executed 'Functions.echo'" in worker.log()
        ),
        timeout=5,
        what="the invocation log line",
    )


# --- Service Bus ------------------------------------------------------------------------------------------


def test_servicebus_message_is_processed_and_completed(
    worker: RunningWorker, toy_emulator: RunningEmulator
) -> None:
    message_id = f"work-{uuid.uuid4()}"
    send(
        toy_emulator,
        "work",
        ServiceBusMessage(
            b'{"hello": "world"}',
            message_id=message_id,
            correlation_id="corr-1",
            content_type="application/json",
            subject="greeting",
            reply_to="replies",
            time_to_live=timedelta(minutes=5),
            application_properties={"kind": "test", "attempt": 3},
        ),
    )

    (record,) = wait_for(lambda: records_with(worker, "work", "message_id", message_id), timeout=10)
    assert record["body"] == '{"hello": "world"}'
    assert record["delivery_count"] == 0
    assert record["correlation_id"] == "corr-1"
    assert record["content_type"] == "application/json"
    assert record["subject"] == record["label"] == "greeting"
    assert record["reply_to"] == "replies"
    assert record["user_properties"] == {"kind": "test", "attempt": 3}
    assert record["application_properties"] == {"kind": "test", "attempt": 3}
    assert isinstance(record["sequence_number"], int)
    assert record["lock_token"]
    assert record["enqueued_time_utc"]
    assert record["time_to_live"] == "0:05:00"  # the runtime parsed the host's TimeSpan text
    assert record["metadata_message_id"] == message_id
    wait_for(lambda: queue_is_empty(toy_emulator, "work"), timeout=10, what="the message to be completed")


def test_servicebus_queue_name_from_an_app_setting(
    worker: RunningWorker, toy_emulator: RunningEmulator
) -> None:
    body = f"via-setting-{uuid.uuid4()}"
    send(toy_emulator, SETTINGS_QUEUE, ServiceBusMessage(body))

    wait_for(lambda: records_with(worker, "setting", "body", body), timeout=10)
    wait_for(lambda: queue_is_empty(toy_emulator, SETTINGS_QUEUE), timeout=10)


def test_servicebus_messages_are_processed_concurrently(
    worker: RunningWorker, toy_emulator: RunningEmulator
) -> None:
    # The toy function waits on a barrier for four parties: it completes only if four run at once.
    bodies = [f"parallel-{uuid.uuid4()}" for _ in range(4)]
    send(toy_emulator, "parallel", *(ServiceBusMessage(body) for body in bodies))

    wait_for(
        lambda: {r["body"] for r in worker.records("parallel")} >= set(bodies),
        timeout=20,
        what="four messages in flight at once",
    )
    wait_for(lambda: queue_is_empty(toy_emulator, "parallel"), timeout=10)


def test_servicebus_poison_message_is_dead_lettered_and_processing_continues(
    worker: RunningWorker, toy_emulator: RunningEmulator
) -> None:
    poison_id = f"poison-{uuid.uuid4()}"
    send(toy_emulator, "poison", ServiceBusMessage(b"cannot be handled", message_id=poison_id))

    with (
        client_for(toy_emulator) as client,
        client.get_queue_receiver("poison", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters,
    ):
        dead = receive_one(dead_letters, timeout=15)
        dead_letters.complete_message(dead)
    assert dead.message_id == poison_id
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    # Abandoned after each failure: delivered twice (MaxDeliveryCount 2), then dead-lettered.
    assert [r["delivery_count"] for r in worker.records("poison")][-2:] == [0, 1]
    assert "ValueError: cannot process" in worker.log()

    work_id = f"after-poison-{uuid.uuid4()}"
    send(toy_emulator, "work", ServiceBusMessage(b"fine", message_id=work_id))
    wait_for(lambda: records_with(worker, "work", "message_id", work_id), timeout=10)
    assert worker.process.poll() is None


def test_servicebus_lock_is_renewed_while_the_function_runs(
    worker: RunningWorker, toy_emulator: RunningEmulator
) -> None:
    # The queue's lock lasts 2 s and the function takes 4 s: without renewal the message would be
    # delivered a second time while the first invocation still runs, and could not be completed.
    before = len(worker.records("slow"))
    send(toy_emulator, "slow", ServiceBusMessage(b"long job"))

    wait_for(
        lambda: any(r["event"] == "finished" for r in worker.records("slow")[before:]),
        timeout=20,
        what="the slow invocation to finish",
    )
    wait_for(
        lambda: queue_is_empty(toy_emulator, "slow"), timeout=10, what="the slow message to be completed"
    )
    events = [(r["event"], r["delivery_count"]) for r in worker.records("slow")[before:]]
    assert events == [("started", 0), ("finished", 0)]
    assert "could not renew" not in worker.log()


# --- Timer ------------------------------------------------------------------------------------------------


def test_timer_fires_every_second(worker: RunningWorker) -> None:
    before = len(worker.records("timer"))

    wait_for(lambda: len(worker.records("timer")) >= before + 2, timeout=3.5, what="two timer runs")
    runs = worker.records("timer")[before:]
    assert all(run["past_due"] is False for run in runs)
    assert 0.5 < runs[1]["at"] - runs[0]["at"] < 1.5


def test_key_flags_turn_on_the_checks(
    toy_emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> None:
    directory = tmp_path_factory.mktemp("keyed-worker")
    running = start_worker(
        toy_environment(toy_emulator, directory),
        directory / "worker.log",
        extra_args=("--function-key", "f-key", "--master-key", "m-key"),
    )
    try:
        wait_ready(running)
        status = running.url("/admin/host/status")
        assert httpx.get(status).status_code == 401
        assert httpx.get(status, headers={"x-functions-key": "f-key"}).status_code == 401
        assert httpx.get(status, params={"code": "m-key"}).status_code == 200
        assert httpx.get(running.url("/api/text")).status_code == 200, "the toy app's routes are anonymous"
        assert "keys checked" in running.log()
    finally:
        stop_process(running.process)
