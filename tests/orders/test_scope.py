"""Which orders a caller sees, over the whole route table: function_app.py's own handlers (behind their
checks) called in process, on the real engine over in-memory ports.

A caller learns nothing of an order outside its scope (another storefront's, or any storefront's to the
shared key) when every answer it gets is the same whether that order exists or not. So each request of
each route of ``orders.routes`` is sent, by each narrow caller, to two stores: one with every order, one
with the caller's own only; the two answers must be equal, request after request. The order ids are sent
as the API shows them and as a client could spell them (the full name, its dot percent-encoded, once or
twice, in capitals).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import azure.functions as func
import function_app
import pytest

from engine.clock import ManualClock
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.tasks import TaskService
from orders import routes
from orders.access import EVERY_ORDER, NO_STOREFRONT, AccessSettings, Caller, Role, Scope
from orders.api import OrdersApi
from orders.catalog import CATALOG
from tests.engine.fakes import MemoryStore, RecordingSender

pytestmark = pytest.mark.anyio

KEY = "the-shared-key"
KEYS = {"web": "web-key", "kiosk": "kiosk-key"}
SETTINGS = AccessSettings(platform_authentication=True, submission_key=KEY, storefront_keys=KEYS)
DEFAULT = CATALOG.current(CATALOG.default)
assert DEFAULT is not None
# Without its payment token: what becomes of a sensitive field is not this test's business.
EXAMPLE = {k: v for k, v in DEFAULT.examples()[0].items() if k != "paymentToken"}
FIRST_STEP = DEFAULT.steps[0].name
# (storefront or None, the id it gave): one order of each storefront, and one of no storefront.
ORDERS = (("web", "w-1"), ("kiosk", "k-1"), (None, "n-1"))
READ = ("GET", "/api/orders/{orderId}")


def principal(*app_roles: str) -> dict[str, str]:
    """The headers App Service authentication sets for a signed-in principal with these app roles."""
    claims = [{"typ": "roles", "val": r} for r in app_roles] + [{"typ": "name", "val": "eve"}]
    body = {"claims": claims, "role_typ": "roles"}
    return {"x-ms-client-principal": base64.b64encode(json.dumps(body).encode()).decode()}


@dataclass(frozen=True)
class Who:
    """A caller: its headers, and the storefront whose orders are its own (None: those of no storefront)."""

    name: str
    headers: dict[str, str]
    own: str | None


NARROW = (
    Who("web", {"x-functions-key": KEYS["web"]}, "web"),
    Who("kiosk", {"x-functions-key": KEYS["kiosk"]}, "kiosk"),
    Who("shared key", {"x-functions-key": KEY}, None),
    Who("no role and the shared key", {**principal(), "x-functions-key": KEY}, None),
)


def spellings(storefront: str | None, order_id: str) -> list[str]:
    """An order's id as a request's path parameter may carry it (the host decodes the path, or not)."""
    if storefront is None:
        return [order_id, f".{order_id}", f"web.{order_id}"]
    return [
        order_id,
        f"{storefront}.{order_id}",
        f"{storefront}%2E{order_id}",
        f"{storefront}%2e{order_id}",
        f"{storefront}%252E{order_id}",
        f"{storefront.upper()}.{order_id}",
        f"{storefront}.{order_id}\n",
        f"{storefront}..{order_id}",
    ]


class World:
    """The app's API over a store of its own holding the given orders."""

    def __init__(self, orders: tuple[tuple[str | None, str], ...]) -> None:
        parts = EngineParts(CATALOG, MemoryStore(), RecordingSender(), ManualClock(), EngineSettings())
        self.tasks = TaskService(parts)
        self.api = OrdersApi(self._tasks)
        self.orders = orders

    async def _tasks(self) -> TaskService:
        return self.tasks

    async def fill(self) -> World:
        for storefront, order_id in self.orders:
            body = json.dumps({**EXAMPLE, "orderId": order_id}).encode()
            assert (await self.api.submit(body, "application/json", storefront)).status == 202
        return self


async def answer(
    monkeypatch: pytest.MonkeyPatch,
    world: World,
    route: tuple[str, str],
    headers: dict[str, str],
    order_id: str,
    etag: str,
) -> tuple[int, Any, dict[str, str]]:
    """What ``route``'s handler answers, with ``order_id`` as its order (status, body, headers)."""
    monkeypatch.setattr(function_app, "api", world.api)
    method, path = route
    values = {"orderId": order_id, "step": FIRST_STEP, "queue": "q", "sequenceNumber": "1", "service": "s"}
    bodies = {"/extend": {"seconds": 5}, "/skip": {"note": "by hand"}}
    body: dict[str, Any] | None = next((b for end, b in bodies.items() if path.endswith(end)), None)
    if route == ("POST", "/api/orders"):
        body = {**EXAMPLE, "orderId": order_id}
    request = func.HttpRequest(
        method,
        "http://localhost" + path,
        headers={**headers, "content-type": "application/json", "if-match": etag},
        params={"processState": "Pending"} if route == ("GET", "/api/orders") else {},
        route_params={name: value for name, value in values.items() if f"{{{name}}}" in path},
        body=json.dumps(body).encode() if body is not None else b"",
    )
    response = await function_app.ROUTED[route](request)
    text = response.get_body()
    content = json.loads(text) if response.mimetype == "application/json" else text
    return response.status_code, content, dict(response.headers)


async def test_every_route_answers_a_narrow_caller_the_same_whether_others_orders_exist_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(function_app, "ACCESS", SETTINGS)
    assert set(function_app.ROUTED) == routes.keys()  # every route is here, behind its check
    operator = principal("Orders.Operator")
    compared = 0
    for who in NARROW:
        own = tuple(order for order in ORDERS if order[0] == who.own)
        # Its own first, so that they are written alike (the same ETags) in both stores.
        every = own + tuple(order for order in ORDERS if order not in own)
        # Both stores get the same requests in the same order: what changes one changes the other alike.
        with_all, with_own = await World(every).fill(), await World(own).fill()
        for route in sorted(routes.keys()):
            ids = [i for sf, oid in ORDERS for i in spellings(sf, oid)] if "{orderId}" in route[1] else ["x"]
            for order_id in ids:
                # The order's ETag, so that If-Match would let an action through, were it the caller's.
                seen = await answer(monkeypatch, with_all, READ, operator, order_id, "")
                etag = seen[2].get("ETag", '"none"')
                answers = [
                    await answer(monkeypatch, world, route, who.headers, order_id, etag)
                    for world in (with_all, with_own)
                ]
                assert answers[0] == answers[1], (who.name, route, order_id)
                compared += 1
    assert compared > 100


async def test_the_test_would_see_a_leak_the_operator_reads_every_order_by_its_full_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(function_app, "ACCESS", SETTINGS)
    world = await World(ORDERS).fill()
    route = ("GET", "/api/orders/{orderId}")
    for headers in (principal("Orders.Operator"), principal("Orders.Reader"), principal("Orders.Approver")):
        for storefront, order_id in ORDERS:
            status, body, _ = await answer(
                monkeypatch, world, route, headers, f"{storefront}.{order_id}" if storefront else order_id, ""
            )
            assert status == 200 and body["storefront"] == storefront
    # And each storefront its own, by the id it gave; the shared key the order of no storefront.
    for who in NARROW:
        for storefront, order_id in ORDERS:
            status, body, _ = await answer(monkeypatch, world, route, who.headers, order_id, "")
            assert (status == 200) == (storefront == who.own), (who.name, order_id)
            if status == 200:
                assert body["orderId"] == order_id


async def test_the_shared_key_reads_no_storefront_s_order_by_its_full_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(function_app, "ACCESS", SETTINGS)
    world = await World(ORDERS).fill()
    unknown = await answer(
        monkeypatch, world, ("GET", "/api/orders/{orderId}"), NARROW[2].headers, "web.zz", ""
    )
    for who in NARROW[2:]:
        for order_id in ("web.w-1", "kiosk.k-1"):
            status, body, _ = await answer(
                monkeypatch, world, ("GET", "/api/orders/{orderId}"), who.headers, order_id, ""
            )
            assert (
                (status, body["error"]["code"])
                == (404, "NotFound")
                == (unknown[0], unknown[1]["error"]["code"])
            )


def test_a_caller_s_scope_follows_its_credential() -> None:
    assert Caller(frozenset({Role.SUBMITTER}), "storefront:web", storefront="web").scope == Scope("web")
    assert Caller(frozenset({Role.SUBMITTER}), "key:submission").scope == NO_STOREFRONT
    assert Caller(frozenset(), "user:eve").scope == NO_STOREFRONT
    for role in (Role.READER, Role.APPROVER, Role.OPERATOR):
        assert Caller(frozenset({role, Role.SUBMITTER}), "user:a").scope == EVERY_ORDER
    web = Scope("web")
    assert web.task_id("o-1") == "web.o-1" and web.task_id("web.o-1") is None
    assert web.sees("web") and not web.sees("kiosk") and not web.sees(None)
    assert NO_STOREFRONT.task_id("o-1") == "o-1" and NO_STOREFRONT.task_id("web.o-1") is None
    assert NO_STOREFRONT.sees(None) and not NO_STOREFRONT.sees("web")
    assert EVERY_ORDER.task_id("web.o-1") == "web.o-1" and EVERY_ORDER.sees("kiosk")
    for bad in ("o-1\n", "web.o-1\n", "", "a/b", "WEB.o-1", "x" * 65):
        assert EVERY_ORDER.task_id(bad) is None and web.task_id(bad) is None, bad


async def test_a_storefront_s_view_of_its_order_shows_its_own_id_and_no_internal_detail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(function_app, "ACCESS", SETTINGS)
    parts = EngineParts(CATALOG, MemoryStore(), RecordingSender(), ManualClock(), EngineSettings())
    world = World((("web", "w-1"),))
    world.tasks = TaskService(parts, Scheduler(parts, "scheduler-7"))  # claims and dispatches at once
    await world.fill()
    _, operator, _ = await answer(monkeypatch, world, READ, principal("Orders.Operator"), "web.w-1", "")
    calls = [call for step in operator["steps"] for call in step["calls"]]
    # What a storefront must not see is there to see: the calls (their bodies, sent under the order's full
    # name, and the Agent's process, once its Agent runs), and the Scheduler's process.
    assert calls and operator["lockedBy"] == "scheduler-7"
    status, own, _ = await answer(monkeypatch, world, READ, NARROW[0].headers, "w-1", "")
    assert status == 200 and own["orderId"] == own["input"]["orderId"] == "w-1" and own["storefront"] == "web"
    assert own["lockedBy"] is None and all(step["calls"] == [] for step in own["steps"])
    assert "web.w-1" not in json.dumps(own) and "scheduler-7" not in json.dumps(own)
    assert [s["state"] for s in own["steps"]] == [s["state"] for s in operator["steps"]]
