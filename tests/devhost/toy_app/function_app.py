"""A toy Functions app for the devhost tests: every trigger kind the worker serves.

Functions record what they saw as JSON lines in files named by environment variables (unset: no record),
so the tests can observe a separate worker process.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

_write_lock = threading.Lock()
# Messages on the `parallel` queue wait here until this many are being processed at once.
_barrier = threading.Barrier(int(os.environ.get("TOY_BARRIER_PARTIES", "4")))


# The `pool/...` routes: synchronous calls hold a thread until released; async ones report and release.
_pool_lock = threading.Lock()
_pool_release = threading.Event()
_pool = {"active": 0, "peak": 0}


def _record(setting: str, **fields: Any) -> None:
    path = os.environ.get(setting)
    if not path:
        return
    line = json.dumps({"at": time.time(), **fields}, default=str)
    with _write_lock, open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


@app.route(route="echo/{name}", methods=["GET", "POST"])
def echo(req: func.HttpRequest) -> func.HttpResponse:
    """Return what the request looked like to the function."""
    body = {
        "method": req.method,
        "url": req.url,
        "params": dict(req.params),
        "route": dict(req.route_params),
        "body": req.get_body().decode("utf-8"),
        "header": req.headers.get("x-toy"),
    }
    return func.HttpResponse(
        json.dumps(body), status_code=200, mimetype="application/json", headers={"X-Echoed": "yes"}
    )


@app.route(route="boom", methods=["GET"])
def boom(req: func.HttpRequest) -> func.HttpResponse:
    """Always fails."""
    raise RuntimeError("boom on purpose")


@app.route(route="items/{id:int}/{tag?}", methods=["GET"])
async def item(req: func.HttpRequest) -> func.HttpResponse:
    """An async function with a constrained and an optional route parameter."""
    return func.HttpResponse(json.dumps(dict(req.route_params)), mimetype="application/json")


@app.route(route="text", methods=["GET"])
def text(req: func.HttpRequest, context: func.Context) -> str:
    """Returns a plain string, and asks for the invocation context."""
    return f"hello from {context.function_name}"


@app.route(route="slow", methods=["GET"])
def slow(req: func.HttpRequest) -> func.HttpResponse:
    """Records that it started, then takes its time (for graceful-shutdown tests)."""
    _record("TOY_SLOW_HTTP_FILE", event="started")
    time.sleep(float(req.params.get("seconds", "1")))
    return func.HttpResponse("done")


@app.route(route="pool/hold", methods=["GET"])
def pool_hold(req: func.HttpRequest) -> func.HttpResponse:
    """A synchronous function that keeps its thread until ``pool/release`` (or 30 s)."""
    with _pool_lock:
        _pool["active"] += 1
        _pool["peak"] = max(_pool["peak"], _pool["active"])
    try:
        _pool_release.wait(timeout=30)
    finally:
        with _pool_lock:
            _pool["active"] -= 1
    return func.HttpResponse("released")


@app.route(route="pool/state", methods=["GET"])
async def pool_state(req: func.HttpRequest) -> func.HttpResponse:
    """An async function: runs on the event loop, so it answers while every thread is held."""
    with _pool_lock:
        body = json.dumps({**_pool, "thread": threading.current_thread().name})
    return func.HttpResponse(body, mimetype="application/json")


@app.route(route="pool/release", methods=["POST"])
async def pool_release(req: func.HttpRequest) -> func.HttpResponse:
    """Let every held ``pool/hold`` call return."""
    _pool_release.set()
    return func.HttpResponse("ok")


@app.service_bus_queue_trigger(arg_name="msg", queue_name="work", connection="ServiceBusConnection")
def work(msg: func.ServiceBusMessage) -> None:
    """Records the message body and what the trigger passed with it."""
    _record(
        "TOY_WORK_FILE",
        body=msg.get_body().decode("utf-8"),
        delivery_count=msg.delivery_count,
        message_id=msg.message_id,
        correlation_id=msg.correlation_id,
        content_type=msg.content_type,
        subject=msg.subject,
        label=msg.label,
        reply_to=msg.reply_to,
        user_properties=msg.user_properties,
        application_properties=msg.application_properties,
        sequence_number=msg.sequence_number,
        lock_token=msg.lock_token,
        enqueued_time_utc=msg.enqueued_time_utc,
        time_to_live=msg.time_to_live,
        metadata_message_id=(msg.metadata or {}).get("MessageId"),
    )


@app.service_bus_queue_trigger(arg_name="msg", queue_name="poison", connection="ServiceBusConnection")
def poison(msg: func.ServiceBusMessage) -> None:
    """Always fails, so the message is abandoned until the queue dead-letters it."""
    _record("TOY_POISON_FILE", delivery_count=msg.delivery_count)
    raise ValueError(f"cannot process {msg.message_id}")


@app.service_bus_queue_trigger(
    arg_name="message", queue_name="%QUEUE_FROM_SETTING%", connection="ServiceBusConnection"
)
async def from_setting(message: func.ServiceBusMessage) -> None:
    """An async function on a queue whose name comes from an app setting."""
    _record("TOY_SETTING_FILE", body=message.get_body().decode("utf-8"))


@app.service_bus_queue_trigger(arg_name="msg", queue_name="parallel", connection="ServiceBusConnection")
def parallel(msg: func.ServiceBusMessage) -> None:
    """Completes only once TOY_BARRIER_PARTIES messages are being processed at the same time."""
    _barrier.wait(timeout=30)
    _record("TOY_PARALLEL_FILE", body=msg.get_body().decode("utf-8"))


@app.service_bus_queue_trigger(arg_name="msg", queue_name="slow", connection="ServiceBusConnection")
def slow_message(msg: func.ServiceBusMessage) -> None:
    """Takes longer than the queue's lock duration, so it only completes if the lock is renewed."""
    _record("TOY_SLOW_FILE", event="started", delivery_count=msg.delivery_count)
    time.sleep(float(os.environ.get("TOY_SLOW_SECONDS", "4")))
    _record("TOY_SLOW_FILE", event="finished", delivery_count=msg.delivery_count)


@app.service_bus_queue_trigger(arg_name="msg", queue_name="hold", connection="ServiceBusConnection")
async def hold(msg: func.ServiceBusMessage) -> None:
    """Records that it started, then holds its message until the file TOY_RELEASE_FILE exists (a body
    starting with ``quick`` returns at once)."""
    body = msg.get_body().decode("utf-8")
    _record("TOY_HOLD_FILE", body=body)
    release = os.environ.get("TOY_RELEASE_FILE", "")
    while release and not body.startswith("quick") and not os.path.exists(release):
        await asyncio.sleep(0.05)  # polling a file the test creates


@app.timer_trigger(schedule="%TOY_SCHEDULE%", arg_name="timer", run_on_startup=False)
def tick(timer: func.TimerRequest) -> None:
    """Appends a line per run."""
    _record("TOY_TIMER_FILE", past_due=timer.past_due)
