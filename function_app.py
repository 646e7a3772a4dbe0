"""Azure Functions bindings (Python v2 model). Wiring only: every function calls the layers below.

HTTP API -> orders.api, each route behind the role check of orders.access; Service Bus triggers -> the
engine's Scheduler and Agents; the timer -> the Supervisor. The same file runs in Azure, under Functions
Core Tools, and under the local devhost.

Every function is ``async def``: the Python worker runs them on its one event loop, so an Agent waiting
on a hung remote service, or any function waiting on storage, holds no thread of the worker's small
pool (``PYTHON_THREADPOOL_THREAD_COUNT``, by default min(32, cores + 4)) and nothing waits behind it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # the app's packages live in src/

import azure.functions as func
from opentelemetry.trace import SpanKind

from engine import (
    AgentReply,
    AgentRequest,
    BreakerStore,
    EngineParts,
    Inbound,
    SchedulerCommand,
    TaskService,
    queues,
    receive,
    tracing,
)
from orders import access, routes
from orders.access import AccessSettings, Caller, Role
from orders.api import Call, OrdersApi, Reply, error
from orders.breakers import BreakersApi
from orders.callbacks import Callbacks, Refused
from orders.catalog import CATALOG, SERVICES
from orders.console import SIGN_IN
from orders.console import console as console_page
from orders.deadletters import DeadLetterParts, DeadLettersApi
from orders.openapi import document
from orders.runtime import runtime
from orders.services.declaration import ServiceDefinition
from orders.settings import callback_secrets, public_base_url
from orders.telemetry_setup import configure_telemetry

configure_telemetry()
# Anonymous at the host: every API route is checked by orders.access instead (see _api), since the host
# takes no signed-in session in place of a function key and people share the storefront's routes.
app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)
ACCESS = AccessSettings.from_environment()


async def _tasks() -> TaskService:
    return (await runtime()).tasks


async def _dead_letters() -> DeadLetterParts:
    return (await runtime()).dead_letters


async def _parts() -> EngineParts:
    return (await runtime()).tasks.parts


async def _breakers() -> BreakerStore:
    return (await runtime()).breakers


# Status URLs start with PUBLIC_BASE_URL (relative without it), never with the request's Host. Read here,
# at import: an invalid value stops the app from loading, with the setting named.
api = OrdersApi(_tasks, public_base_url())
breakers = BreakersApi(CATALOG.agents, _breakers)
dead_letters = DeadLettersApi(_dead_letters, tuple(queues.all_queues(CATALOG.agents)))
callbacks = Callbacks(SERVICES, callback_secrets(), _tasks)
SB = "ServiceBusConnection"


def _respond(reply: Reply) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(reply.body), status_code=reply.status, headers=reply.headers, mimetype="application/json"
    )


def _headers(req: func.HttpRequest) -> dict[str, str]:
    return {name.lower(): value for name, value in req.headers.items()}


def _call(req: func.HttpRequest, caller: Caller) -> Call:
    headers = _headers(req)
    return Call(
        req.get_body(), headers.get("content-type"), headers, dict(req.params), caller.actor, caller.scope
    )


Handler = Callable[[func.HttpRequest, Caller], Awaitable[func.HttpResponse]]
# (METHOD, /api/route) -> the function the host calls, behind its check: one per route of orders.routes.
ROUTED: dict[tuple[str, str], Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]] = {}


def _api(handler: Handler) -> object:
    """Serve ``handler`` at the route orders.routes declares for it by name (its method, its path, who may
    call it); KeyError for a function no route names."""
    declared = routes.named(handler.__name__)
    method, path = declared.key
    route = declared.binding

    async def guarded(req: func.HttpRequest) -> func.HttpResponse:
        if method == "GET":  # reads change nothing: no span of their own
            return await checked(req)
        # A change has a span (under the caller's, when it sends one): what it starts is traced from it.
        parent = req.headers.get(tracing.TRACEPARENT)
        with tracing.span(f"{method} {path}", SpanKind.SERVER, parent=parent) as span:
            response = await checked(req)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    async def checked(req: func.HttpRequest) -> func.HttpResponse:
        caller = access.authenticate(_headers(req), ACCESS)
        refusal = access.check(declared.allowed, caller)
        if refusal is not None:
            if refusal.status == 401 and route == "console":
                return _page(SIGN_IN.status, SIGN_IN.body, SIGN_IN.headers)
            reply = error(refusal.status, refusal.code, refusal.message)
            if refusal.status == 401:
                reply.headers["WWW-Authenticate"] = 'Bearer realm="orders"'
            return _respond(reply)
        return await handler(req, caller or Caller(frozenset(), "anonymous"))

    # The host knows a function by its name and its one parameter, req.
    guarded.__name__ = guarded.__qualname__ = handler.__name__
    guarded.__doc__ = handler.__doc__
    ROUTED[(method, path)] = guarded
    return app.route(route=route, methods=[method], auth_level=func.AuthLevel.ANONYMOUS)(guarded)


def _handling(span: str, msg: func.ServiceBusMessage, queue: str) -> AbstractContextManager[object]:
    """The span of one message's handling, a child of the span that sent it (engine.tracing)."""
    parent = tracing.from_properties(msg.application_properties)
    return tracing.span(span, SpanKind.CONSUMER, parent=parent, attributes={tracing.QUEUE: queue})


def _page(status: int, body: bytes, headers: dict[str, str]) -> func.HttpResponse:
    return func.HttpResponse(body, status_code=status, headers=headers, mimetype="text/html", charset="utf-8")


# ---- HTTP API ---------------------------------------------------------------------------------------
@_api
async def submit_order(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Accept an order: 202 with its status URL. Its trace starts here (or under the caller's)."""
    with tracing.span(tracing.ORDER_SUBMIT):
        return _respond(await api.submit(req.get_body(), req.headers.get("content-type"), caller.storefront))


@_api
async def list_orders(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """List orders in one ProcessState, or find orders (orders.search_params), paged."""
    return _respond(await api.list_by_state(dict(req.params), caller.scope))


@_api
async def order_counts(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """How many orders each ProcessState holds."""
    return _respond(await api.counts())


@_api
async def get_order(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """An order's state and steps."""
    return _respond(await api.get(req.route_params["orderId"], caller.scope))


@_api
async def order_audit(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Who did what to an order: operator actions and automatic errors, oldest first."""
    return _respond(await api.audit(req.route_params["orderId"], caller.scope))


# ---- Operator actions: one function per route of an action of engine.operator_actions ----------------
def _register_action(route: routes.Route) -> None:
    action = route.action
    assert action is not None

    async def act(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
        p = req.route_params
        return _respond(await api.act(action, p["orderId"], p.get("step"), _call(req, caller)))

    act.__name__ = act.__qualname__ = route.operation_id
    act.__doc__ = f"{route.summary} (If-Match)."
    _api(act)


for _route in routes.ACTIONS:
    _register_action(_route)


@_api
async def dead_letter_counts(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """How many dead-lettered messages each queue holds."""
    return _respond(await dead_letters.counts())


@_api
async def list_dead_letters(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """One queue's dead-lettered messages, a page at a time."""
    return _respond(await dead_letters.list(req.route_params["queue"], dict(req.params)))


@_api
async def dead_letter_audit(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Replays and purges on a queue that named no known order."""
    return _respond(await dead_letters.audit(req.route_params["queue"]))


@_api
async def replay_dead_letter(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Operator: send a copy of a dead-lettered message to its queue, then drop it."""
    p = req.route_params
    return _respond(await dead_letters.replay(p["queue"], p["sequenceNumber"], _call(req, caller)))


@_api
async def purge_dead_letter(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Operator: drop a dead-lettered message."""
    p = req.route_params
    return _respond(await dead_letters.purge(p["queue"], p["sequenceNumber"], _call(req, caller)))


@_api
async def list_breakers(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Every agent's shared circuit breaker."""
    return _respond(await breakers.list())


@_api
async def openapi(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """The OpenAPI 3.1 document of this API, generated from its models."""
    return _respond(Reply(200, document()))


@_api
async def console(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """The operator console: one HTML page over this API, with action buttons for an operator only."""
    roles = caller.roles
    page = console_page(_headers(req), can_act=Role.OPERATOR in roles, can_approve=Role.APPROVER in roles)
    return _page(page.status, page.body, page.headers)


@_api
async def service_callback(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """A service that took a call to answer later sends the outcome (signed with its callback secret)."""
    taken = await callbacks.receive(req.route_params["service"], _headers(req), req.get_body())
    if isinstance(taken, Refused):
        return _respond(error(taken.status, taken.code, taken.message, taken.details))
    return _respond(Reply(202, {"accepted": True, "outcome": taken.reply.outcome.value}))


@_api
async def health(req: func.HttpRequest, caller: Caller) -> func.HttpResponse:
    """Liveness."""
    return _respond(api.health())


def _inbound(msg: func.ServiceBusMessage, queue: str) -> Inbound:
    return Inbound(msg.get_body(), queue, msg.message_id, msg.delivery_count, msg.correlation_id)


async def _command(command: SchedulerCommand) -> None:
    await (await runtime()).scheduler.handle_command(command)


async def _reply(reply: AgentReply) -> None:
    await (await runtime()).scheduler.handle_reply(reply)


# ---- Scheduler --------------------------------------------------------------------------------------
@app.service_bus_queue_trigger(arg_name="msg", queue_name=queues.SCHEDULER_QUEUE, connection=SB)
async def scheduler(msg: func.ServiceBusMessage) -> None:
    """New, retried and resumed orders."""
    with _handling(tracing.SCHEDULER_COMMAND, msg, queues.SCHEDULER_QUEUE):
        await receive(SchedulerCommand, _inbound(msg, queues.SCHEDULER_QUEUE), _command, _parts)


@app.service_bus_queue_trigger(arg_name="msg", queue_name=queues.REPLY_QUEUE, connection=SB)
async def scheduler_replies(msg: func.ServiceBusMessage) -> None:
    """Agents' replies."""
    with _handling(tracing.SCHEDULER_REPLY, msg, queues.REPLY_QUEUE):
        await receive(AgentReply, _inbound(msg, queues.REPLY_QUEUE), _reply, _parts)


# ---- Agents: one function per declared service (orders.catalog.SERVICES), on its own request queue ----
def _register_agent(service: ServiceDefinition) -> None:
    queue = queues.agent_queue(service.name)

    async def call(request: AgentRequest) -> None:
        await (await runtime()).agents[service.name].handle(request)

    async def agent(msg: func.ServiceBusMessage) -> None:
        with _handling(tracing.AGENT_CALL, msg, queue):
            await receive(AgentRequest, _inbound(msg, queue), call, _parts)

    agent.__doc__ = f"{service.description}."
    trigger = app.service_bus_queue_trigger(arg_name="msg", queue_name=queue, connection=SB)
    app.function_name(name=service.function_name)(trigger(agent))


for _service in SERVICES:
    _register_agent(_service)


# ---- Supervisor -------------------------------------------------------------------------------------
@app.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
async def supervisor(timer: func.TimerRequest) -> None:
    """Find steps past their complete-by and arrange recovery; then, now and then, measure the queues."""
    parts = await runtime()
    await parts.supervisor.sweep()
    await parts.gauges.measure()


@app.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
async def retention(timer: func.TimerRequest) -> None:
    """Purge orders finished longer ago than ORDER_RETENTION, in bounded batches."""
    await (await runtime()).retention.run()


@app.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
async def backfill(timer: func.TimerRequest) -> None:
    """Write what this release adds to orders stored before it, a bounded part per run, until done."""
    parts = (await runtime()).tasks.parts
    await parts.backfills.advance(parts.clock.now())


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
