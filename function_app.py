"""Azure Functions bindings (Python v2 model). Wiring only: every function calls the layers below.

HTTP API -> orders.api; Service Bus triggers -> the engine's Scheduler and Agents; the timer -> the
Supervisor. The same file runs in Azure, under Functions Core Tools, and under the local devhost.

Every function is ``async def``: the Python worker runs them on its one event loop, so an Agent waiting
on a hung remote service, or any function waiting on storage, holds no thread of the worker's small
pool (``PYTHON_THREADPOOL_THREAD_COUNT``, by default min(32, cores + 4)) and nothing waits behind it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # the app's packages live in src/

import azure.functions as func

from engine import queues
from engine.inbound import parse
from engine.messages import AgentReply, AgentRequest, SchedulerCommand
from engine.ports import BreakerStore
from engine.tasks import TaskService
from orders.api import Call, OrdersApi, Reply
from orders.breakers import BreakersApi
from orders.catalog import CATALOG, SERVICES
from orders.console import console as console_page
from orders.deadletters import DeadLetterParts, DeadLettersApi
from orders.openapi import document
from orders.runtime import runtime
from orders.services.declaration import ServiceDefinition
from orders.telemetry_setup import configure_telemetry

configure_telemetry()
app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)


async def _tasks() -> TaskService:
    return (await runtime()).tasks


async def _dead_letters() -> DeadLetterParts:
    return (await runtime()).dead_letters


async def _breakers() -> BreakerStore:
    return (await runtime()).breakers


api = OrdersApi(_tasks)
breakers = BreakersApi(CATALOG.agents, _breakers)
dead_letters = DeadLettersApi(_dead_letters, tuple(queues.all_queues(CATALOG.agents)))
SB = "ServiceBusConnection"


def _respond(reply: Reply) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(reply.body), status_code=reply.status, headers=reply.headers, mimetype="application/json"
    )


def _call(req: func.HttpRequest) -> Call:
    headers = {name.lower(): value for name, value in req.headers.items()}
    return Call(req.get_body(), headers.get("content-type"), headers, dict(req.params))


def _base_url(req: func.HttpRequest) -> str:
    parts = urlsplit(req.url)
    return f"{parts.scheme}://{parts.netloc}"


# ---- HTTP API ---------------------------------------------------------------------------------------
@app.route(route="orders", methods=["POST"])
async def submit_order(req: func.HttpRequest) -> func.HttpResponse:
    """Accept an order: 202 with its status URL."""
    return _respond(await api.submit(req.get_body(), req.headers.get("content-type"), _base_url(req)))


@app.route(route="orders", methods=["GET"])
async def list_orders(req: func.HttpRequest) -> func.HttpResponse:
    """List orders in one ProcessState, paged."""
    return _respond(await api.list_by_state(dict(req.params)))


@app.route(route="order-counts", methods=["GET"])
async def order_counts(req: func.HttpRequest) -> func.HttpResponse:
    """How many orders each ProcessState holds."""
    return _respond(await api.counts())


@app.route(route="orders/{orderId}", methods=["GET"])
async def get_order(req: func.HttpRequest) -> func.HttpResponse:
    """An order's state and steps."""
    return _respond(await api.get(req.route_params["orderId"]))


@app.route(route="orders/{orderId}/audit", methods=["GET"])
async def order_audit(req: func.HttpRequest) -> func.HttpResponse:
    """Who did what to an order: operator actions and automatic errors, oldest first."""
    return _respond(await api.audit(req.route_params["orderId"]))


@app.route(route="orders/{orderId}/resubmit", methods=["POST"])
async def resubmit_order(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: send an order in Error back to Pending (If-Match)."""
    return _respond(await api.resubmit(req.route_params["orderId"], _call(req)))


@app.route(route="orders/{orderId}/cancel", methods=["POST"])
async def cancel_order(req: func.HttpRequest) -> func.HttpResponse:
    """Compensate an order that is not terminal (If-Match)."""
    return _respond(await api.cancel(req.route_params["orderId"], _call(req)))


@app.route(route="orders/{orderId}/steps/{step}/retry", methods=["POST"])
async def retry_step(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: re-dispatch the order's current step now (If-Match)."""
    p = req.route_params
    return _respond(await api.retry_step(p["orderId"], p["step"], _call(req)))


@app.route(route="orders/{orderId}/steps/{step}/extend", methods=["POST"])
async def extend_step(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: push the running step's CompleteBy (If-Match)."""
    p = req.route_params
    return _respond(await api.extend_step(p["orderId"], p["step"], _call(req)))


@app.route(route="orders/{orderId}/steps/{step}/skip", methods=["POST"])
async def skip_step(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: mark the current step done by hand and continue (If-Match)."""
    p = req.route_params
    return _respond(await api.skip_step(p["orderId"], p["step"], _call(req)))


@app.route(route="deadletters", methods=["GET"])
async def dead_letter_counts(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: how many dead-lettered messages each queue holds."""
    return _respond(await dead_letters.counts())


@app.route(route="deadletters/{queue}", methods=["GET"])
async def list_dead_letters(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: one queue's dead-lettered messages, a page at a time."""
    return _respond(await dead_letters.list(req.route_params["queue"], dict(req.params)))


@app.route(route="deadletters/{queue}/audit", methods=["GET"])
async def dead_letter_audit(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: replays and purges on a queue that named no known order."""
    return _respond(await dead_letters.audit(req.route_params["queue"]))


@app.route(route="deadletters/{queue}/{sequenceNumber}/replay", methods=["POST"])
async def replay_dead_letter(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: send a copy of a dead-lettered message to its queue, then drop it."""
    p = req.route_params
    return _respond(await dead_letters.replay(p["queue"], p["sequenceNumber"], _call(req)))


@app.route(route="deadletters/{queue}/{sequenceNumber}/purge", methods=["POST"])
async def purge_dead_letter(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: drop a dead-lettered message."""
    p = req.route_params
    return _respond(await dead_letters.purge(p["queue"], p["sequenceNumber"], _call(req)))


@app.route(route="breakers", methods=["GET"])
async def list_breakers(req: func.HttpRequest) -> func.HttpResponse:
    """Operator: every agent's shared circuit breaker."""
    return _respond(await breakers.list())


@app.route(route="openapi.json", methods=["GET"])
async def openapi(req: func.HttpRequest) -> func.HttpResponse:
    """The OpenAPI 3.1 document of this API, generated from its models."""
    return _respond(Reply(200, document()))


@app.route(route="console", methods=["GET"])
async def console(req: func.HttpRequest) -> func.HttpResponse:
    """The operator console: one HTML page over this API (the same key, from its ?code=)."""
    page = console_page(_call(req).headers)
    return func.HttpResponse(
        page.body, status_code=page.status, headers=page.headers, mimetype="text/html", charset="utf-8"
    )


@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: func.HttpRequest) -> func.HttpResponse:
    """Liveness."""
    return _respond(api.health())


# ---- Scheduler --------------------------------------------------------------------------------------
@app.service_bus_queue_trigger(arg_name="msg", queue_name=queues.SCHEDULER_QUEUE, connection=SB)
async def scheduler(msg: func.ServiceBusMessage) -> None:
    """New, retried and resumed orders."""
    command = parse(
        SchedulerCommand, msg.get_body(), queues.SCHEDULER_QUEUE, msg.message_id, msg.delivery_count
    )
    await (await runtime()).scheduler.handle_command(command)


@app.service_bus_queue_trigger(arg_name="msg", queue_name=queues.REPLY_QUEUE, connection=SB)
async def scheduler_replies(msg: func.ServiceBusMessage) -> None:
    """Agents' replies."""
    reply = parse(AgentReply, msg.get_body(), queues.REPLY_QUEUE, msg.message_id, msg.delivery_count)
    await (await runtime()).scheduler.handle_reply(reply)


# ---- Agents: one function per declared service (orders.catalog.SERVICES), on its own request queue ----
def _register_agent(service: ServiceDefinition) -> None:
    queue = queues.agent_queue(service.name)

    async def agent(msg: func.ServiceBusMessage) -> None:
        request = parse(AgentRequest, msg.get_body(), queue, msg.message_id, msg.delivery_count)
        await (await runtime()).agents[service.name].handle(request)

    agent.__doc__ = f"{service.description}."
    trigger = app.service_bus_queue_trigger(arg_name="msg", queue_name=queue, connection=SB)
    app.function_name(name=service.function_name)(trigger(agent))


for _service in SERVICES:
    _register_agent(_service)


# ---- Supervisor -------------------------------------------------------------------------------------
@app.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
async def supervisor(timer: func.TimerRequest) -> None:
    """Find steps past their complete-by and arrange recovery."""
    await (await runtime()).supervisor.sweep()


@app.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
async def retention(timer: func.TimerRequest) -> None:
    """Purge orders finished longer ago than ORDER_RETENTION, in bounded batches."""
    await (await runtime()).retention.run()


# ---- Remote-service simulators, for a deployment with no real remote services (ENABLE_SIMULATORS=true) ----
# Two functions with different keys: the services' calls need SIMULATORS_KEY (the agents send it; the
# simulators check it), the controls (faults, ledger, stats, health) the host's master key. Their
# templates cannot both match one path (a control is one segment, a service call two or more), and each
# function forwards only its own paths, whatever the host's route precedence.
if os.environ.get("ENABLE_SIMULATORS", "").lower() == "true":
    from simulators.hosted import hosted_app, is_control_path, is_service_path

    _simulators = func.AsgiMiddleware(hosted_app())

    def _not_found(req: func.HttpRequest) -> func.HttpResponse:
        body = {"error": {"code": "NotFound", "message": f"no route {req.method} {urlsplit(req.url).path}"}}
        return func.HttpResponse(json.dumps(body), status_code=404, mimetype="application/json")

    @app.route(
        route="sim/{service}/{collection}/{*rest}", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS
    )
    async def simulators(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
        """The declared services' simulators: their apply and compensate calls (demo only)."""
        if not is_service_path(urlsplit(req.url).path):
            return _not_found(req)
        return await _simulators.handle_async(req, context)

    @app.route(route="sim/{control}", methods=["GET", "POST"], auth_level=func.AuthLevel.ADMIN)
    async def simulators_control(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
        """The simulators' fault profile, ledger, counters and health: master key only (demo only)."""
        if not is_control_path(urlsplit(req.url).path):
            return _not_found(req)
        return await _simulators.handle_async(req, context)
