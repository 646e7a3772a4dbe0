"""No input makes a fault: function_app.py's own handlers in process, on the real engine and the Table
Storage store on Azurite (dead letters in memory: the broker is not what is tried here).

First the inputs that were 500s (each a 4xx with a JSON error now), then a property: for every route of
``orders.routes``, requests generated from its OpenAPI operation (schemathesis: valid and invalid path
and query parameters, headers and bodies), with forged continuation tokens, odd order ids, every kind
of caller and signed callbacks mixed in, are answered below 500, and every error with the JSON error
shape. A route added to the table is tried with no change here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import azure.functions as func
import function_app
import pytest
import schemathesis
from azure.data.tables.aio import TableServiceClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from adapters.breaker_store import TableBreakerStore
from adapters.table_store import TableStateStore
from engine import queues
from engine.clock import SystemClock
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.tasks import TaskService
from orders import openapi, routes
from orders.access import AccessSettings
from orders.api import OrdersApi
from orders.breakers import BreakersApi
from orders.callbacks import Callbacks, signed_headers
from orders.catalog import CATALOG, SERVICES
from orders.deadletters import DeadLetterParts, DeadLettersApi
from tests.engine.fakes import RecordingSender
from tests.orders.test_deadletters import MemoryDeadLetters
from tests.orders.test_scope import EXAMPLE, KEY, KEYS, principal

SECRET = "the-callback-secret"
PAYMENT = next(s for s in SERVICES if s.callback_secret_setting)
SETTINGS = AccessSettings(platform_authentication=True, submission_key=KEY, storefront_keys=KEYS)
OPERATOR = principal("Orders.Operator")
# A principal whose name and object id are as long as headers carry (the audit trail keeps 512 characters).
LONG = {
    **OPERATOR,
    "x-ms-client-principal-name": "n" * 5000,
    "x-ms-client-principal-id": "0" * 5000,
}
CALLERS = [
    {},
    OPERATOR,
    principal("Orders.Reader"),
    principal("Orders.Approver"),
    principal(),
    LONG,
    {"x-functions-key": KEY},
    {"x-functions-key": KEYS["web"]},
    {**principal(), "x-functions-key": KEY},
]


@dataclass
class App:
    """function_app.py's handlers, run on one event loop of their own."""

    loop: asyncio.AbstractEventLoop

    def call(
        self,
        route: tuple[str, str],
        path: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> func.HttpResponse:
        request = func.HttpRequest(
            route[0],
            "http://localhost" + route[1],
            headers=headers or {},
            params=query or {},
            route_params=path or {},
            body=body,
        )
        return self.loop.run_until_complete(function_app.ROUTED[route](request))


@pytest.fixture(scope="module")
def app(azurite_connection_string: str) -> Iterator[App]:
    loop = asyncio.new_event_loop()
    service = TableServiceClient.from_connection_string(azurite_connection_string)
    store = loop.run_until_complete(
        TableStateStore.from_service(service, "t" + uuid.uuid4().hex[:16], shards=2)
    )
    parts = EngineParts(CATALOG, store, RecordingSender(), SystemClock(), EngineSettings())
    tasks = TaskService(parts)
    every_queue = tuple(queues.all_queues(CATALOG.agents))
    letters = MemoryDeadLetters()
    letters.queues = {q: [] for q in every_queue}

    async def resolve() -> TaskService:
        return tasks

    async def dead_letter_parts() -> DeadLetterParts:
        return DeadLetterParts(letters, store, tasks, every_queue)

    async def breaker_store() -> TableBreakerStore:
        return TableBreakerStore(store.table, counter=store.counter)

    api = OrdersApi(resolve)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(function_app, "ACCESS", SETTINGS)
        patch.setattr(function_app, "api", api)
        patch.setattr(function_app, "breakers", BreakersApi(CATALOG.agents, breaker_store))
        patch.setattr(function_app, "dead_letters", DeadLettersApi(dead_letter_parts, every_queue))
        patch.setattr(function_app, "callbacks", Callbacks(SERVICES, {PAYMENT.name: SECRET}, resolve))
        for storefront, order_id in (("web", "w-1"), (None, "o-1")):
            body = json.dumps({**EXAMPLE, "orderId": order_id}).encode()
            loop.run_until_complete(api.submit(body, "application/json", storefront))
        yield App(loop)
    loop.run_until_complete(store.close())
    loop.run_until_complete(service.close())
    loop.close()


def error_of(response: func.HttpResponse) -> tuple[int, str]:
    """The status and error code of an error answer, which must have the JSON error shape."""
    assert response.mimetype == "application/json", response.get_body()[:200]
    error = json.loads(response.get_body())["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str), error
    return response.status_code, error["code"]


def token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


LIST = ("GET", "/api/orders")


# ---- the inputs that were 500s --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "query",
    [
        {"workflowVersion": "99999999999999999999"},
        {"workflowVersion": "٣"},
        {"submittedFrom": "0001-01-01T00:00:00+01:00"},
        {"submittedTo": "9999-12-31T23:59:59-01:00"},
        {"processState": "Pending", "continuationToken": token('{"s": 1e400, "t": null}')},
        {"processState": "Pending", "continuationToken": token('{"s": Infinity}')},
        {"processState": "Pending", "continuationToken": token('{"s": 0, "t": "text"}')},
        {"processState": "Pending", "continuationToken": token('{"s": 0, "t": [1]}')},
        {"processState": "Pending", "continuationToken": token('{"s": [0]}')},
        {"customerId": "c-1", "continuationToken": token('{"n": 2, "d": [1e400], "a": {}}')},
        {"customerId": "c-1", "continuationToken": token('{"n": 2, "d": [], "a": {"0": 1}}')},
    ],
)
def test_a_query_that_was_a_500_is_a_400(app: App, query: dict[str, str]) -> None:
    assert error_of(app.call(LIST, query=query, headers=OPERATOR)) == (400, "ValidationFailed")


def test_a_long_principal_is_audited_within_the_trail_s_limit(app: App) -> None:
    # In trust mode (the platform's headers believed): as long a name and object id as headers carry.
    read = app.call(("GET", "/api/orders/{orderId}"), {"orderId": "o-1"}, headers=OPERATOR)
    assert read.status_code == 200
    cancel = app.call(
        ("POST", "/api/orders/{orderId}/cancel"),
        {"orderId": "o-1"},
        headers={**LONG, "if-match": read.headers["ETag"]},
    )
    assert cancel.status_code == 202, cancel.get_body()
    trail = app.call(("GET", "/api/orders/{orderId}/audit"), {"orderId": "o-1"}, headers=OPERATOR)
    [entry] = [e for e in json.loads(trail.get_body())["items"] if e["action"] == "cancel"]
    assert entry["actor"].startswith("user:nnn") and len(entry["actor"]) <= 512


# ---- the property --------------------------------------------------------------------------------------
SCHEMA = schemathesis.openapi.from_dict(openapi.document())
# Continuation tokens as a client might forge them: the store's encoding around any JSON it could hold.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
TOKENS = st.one_of(
    st.text(max_size=40),
    st.builds(lambda d: token(json.dumps(d)), st.fixed_dictionaries({"s": JSON, "t": JSON})),
    st.builds(lambda d: token(json.dumps(d)), st.fixed_dictionaries({"n": JSON, "d": JSON, "a": JSON})),
    st.builds(token, st.text(max_size=40)),
)
# Values at the edges of what a parameter's parser takes: digits that are not ASCII, numbers past any
# bound, times whose UTC is out of range, controls, an id's full name and its encodings.
EDGE_VALUES = [
    "99999999999999999999",
    "9" * 5000,
    "-1",
    "0",
    "1e400",
    "NaN",
    "Infinity",
    "٣",
    "²",
    "1_0",
    " 1",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "2026-13-40T25:61:61Z",
    "2026-01-01T00:00:60z",
    "\n",
    "\x00",
    "web.w-1",
    "web%2Ew-1",
    'W/"1"',
    "*",
    "",
]
EDGES = st.sampled_from(EDGE_VALUES) | st.text(max_size=30)
ORDER_IDS = st.sampled_from(
    ["o-1", "web.w-1", "w-1", "web%2Ew-1", "web.w-1\n", "a/b", "x" * 300, "", "%", "kiosk.o-1"]
) | st.text(max_size=70)


def request_strategy(route: tuple[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    """Requests for one route: its operation's generated cases, with credentials, tokens and ids mixed in."""
    method, path = route
    operation = SCHEMA[path][method]
    named = {"path": [], "query": [], "header": []}
    for parameter in openapi.document()["paths"][path][method.lower()].get("parameters", []):
        named[parameter["in"]].append(parameter["name"])
    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    return st.fixed_dictionaries(
        {
            "case": cases,
            "caller": st.sampled_from(CALLERS),
            "token": st.none() | TOKENS,
            "order_id": st.none() | ORDER_IDS,
            "signed": st.booleans(),
            **{
                where: st.dictionaries(st.sampled_from(names), EDGES, max_size=3) if names else st.just({})
                for where, names in named.items()
            },
        }
    )


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def send(app: App, route: tuple[str, str], drawn: dict[str, Any]) -> func.HttpResponse:
    case: schemathesis.Case = drawn["case"]
    path = {name: text_of(value) for name, value in (case.path_parameters or {}).items()} | drawn["path"]
    if drawn["order_id"] is not None and "orderId" in path:
        path["orderId"] = drawn["order_id"]
    query = {name: text_of(value) for name, value in (case.query or {}).items()} | drawn["query"]
    if drawn["token"] is not None:
        query["continuationToken"] = drawn["token"]
    headers = {name.lower(): text_of(value) for name, value in (case.headers or {}).items()}
    headers.update({name.lower(): value for name, value in drawn["header"].items()})
    headers.update(drawn["caller"])
    body = b""
    if case.body is not None and not isinstance(case.body, schemathesis.core.NotSet):
        if isinstance(case.body, dict):
            # Sealing a sensitive field needs a key this test does not configure: not what is tried here.
            case.body.pop("paymentToken", None)
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        headers.setdefault("content-type", case.media_type or "application/json")
    if route == ("POST", "/api/callbacks/{service}") and drawn["signed"]:
        path["service"] = PAYMENT.name
        signed = signed_headers(SECRET, body, time.time())
        headers.update({name.lower(): value for name, value in signed.items()})
    return app.call(route, path, query, headers, body)


def parameters(route: tuple[str, str]) -> list[tuple[str, str]]:
    """(where, name) of each parameter the document gives the route (path, query, header)."""
    method, path = route
    entry = openapi.document()["paths"][path][method.lower()]
    return [(p["in"], p["name"]) for p in entry.get("parameters", [])]


def assert_answered(route: tuple[str, str], response: func.HttpResponse, what: object) -> None:
    """Below 500, and an error in the JSON error shape (the console's 401 is a page to sign in)."""
    assert response.status_code < 500, (route, what, response.get_body()[:300])
    if response.status_code >= 400 and response.mimetype != "text/html":
        error_of(response)
    elif response.status_code >= 400:
        assert route == ("GET", "/api/console") and response.status_code == 401


BASE_PATH = {
    "orderId": "o-1",
    "step": CATALOG.workflows[0].steps[0].name,
    "queue": queues.SCHEDULER_QUEUE,
    "sequenceNumber": "1",
    "service": PAYMENT.name,
}


@pytest.mark.parametrize("route", sorted(routes.keys()), ids=lambda r: f"{r[0]} {r[1]}")
def test_every_parameter_of_every_route_at_its_edges(app: App, route: tuple[str, str]) -> None:
    method, path = route
    base_path = {k: v for k, v in BASE_PATH.items() if f"{{{k}}}" in path}
    for where, name in parameters(route):
        for value in EDGE_VALUES:
            for caller in (OPERATOR, {"x-functions-key": KEYS["web"]}):
                request: dict[str, dict[str, str]] = {"path": dict(base_path), "query": {}, "header": {}}
                request[where][name] = value
                headers = {**request["header"], **caller}
                body = b"{}" if method == "POST" else b""
                if method == "POST":
                    headers.setdefault("content-type", "application/json")
                response = app.call(route, request["path"], request["query"], headers, body)
                assert_answered(route, response, (where, name, value))


def holds(app: App, route: tuple[str, str]) -> Callable[[], None]:
    @given(drawn=request_strategy(route))
    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(drawn: dict[str, Any]) -> None:
        assert_answered(route, send(app, route, drawn), drawn)

    return run


@pytest.mark.parametrize("route", sorted(routes.keys()), ids=lambda r: f"{r[0]} {r[1]}")
def test_no_request_to_any_route_is_answered_with_a_fault(app: App, route: tuple[str, str]) -> None:
    holds(app, route)()
