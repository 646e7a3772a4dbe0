"""Who may do what, through ``orders-devhost --auth roles``, for every operation of GET /api/openapi.json.

With the devhost playing App Service authentication (clients' principal headers removed): no credential
is a 401, a forged principal header a 401, the submitter's key a 403 but on its two routes, the reader's a
403 on every POST, the approver's a 403 on every POST but approve and reject, the operator's never
refused; and no refusal changes the state store. With the devhost
trusting principal headers: an Entra ID principal is what its app roles say, and the audit trail names
it by name and object id.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from engine import queues
from orders import access, routes
from orders.access import Role
from orders.catalog import SERVICES
from tests.e2e.conftest import FIRST_STEP, LocalStack, another_order, new_order, start_stack, stop_stack
from tests.e2e.test_openapi_contract import Store
from tests.e2e.test_retention import kept_as
from tests.support import wait_for

HANG = {"hangRate": 1, "hangMs": 60_000}
OBJECT_ID = str(uuid.uuid4())


@dataclass(frozen=True)
class Call:
    """One concrete request for one documented operation."""

    method: str
    path: str  # as documented
    url: str
    params: dict[str, str]
    body: dict[str, Any] | None
    if_match: bool


def principal(*app_roles: str, name: str = "ada@contoso.example") -> dict[str, str]:
    """The headers App Service authentication sets for a signed-in Entra ID principal."""
    claims = [{"typ": "roles", "val": role} for role in app_roles]
    claims += [
        {"typ": "name", "val": name},
        {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": OBJECT_ID},
    ]
    body = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return {
        "X-MS-CLIENT-PRINCIPAL": base64.b64encode(json.dumps(body).encode()).decode(),
        "X-MS-CLIENT-PRINCIPAL-NAME": name,
        "X-MS-CLIENT-PRINCIPAL-ID": OBJECT_ID,
        "X-MS-CLIENT-PRINCIPAL-IDP": "aad",
    }


def documented_calls(document: dict[str, Any], order: dict[str, Any]) -> list[Call]:
    """A request per operation of the document, aimed at a real order, its first step, a real queue."""
    values = {
        "orderId": order["orderId"],
        "step": order["steps"][0]["name"],
        "queue": queues.SCHEDULER_QUEUE,
        "sequenceNumber": "1",
        # A service that sends callbacks: only its signature lets one in, never a role.
        "service": next(s.name for s in SERVICES if s.callback_secret_setting),
    }
    bodies: dict[str, dict[str, Any]] = {
        "submit_order": new_order(),
        "extend_step": {"seconds": 5},
        "skip_step": {"note": "by hand"},
    }
    calls = []
    for path, methods in document["paths"].items():
        for method, entry in methods.items():
            url = path
            for name, value in values.items():
                url = url.replace(f"{{{name}}}", value)
            parameters = entry.get("parameters", [])
            query = {p["name"]: "Pending" for p in parameters if p["in"] == "query" and p["required"]}
            if_match = any(p["name"] == "If-Match" for p in parameters)
            calls.append(Call(method.upper(), path, url, query, bodies.get(entry["operationId"]), if_match))
    return calls


def send(stack: LocalStack, call: Call, headers: dict[str, str], etag: str) -> httpx.Response:
    sent = {**headers, **({"If-Match": etag} if call.if_match else {})}
    with httpx.Client(base_url=stack.devhost.api_url, timeout=30) as client:
        return client.request(call.method, call.url, params=call.params, json=call.body, headers=sent)


def refused(response: httpx.Response, status: int) -> bool:
    """``status`` with the error shape (the console's 401 is a page with a link to sign in)."""
    if response.status_code != status:
        return False
    if "text/html" in response.headers.get("content-type", ""):
        return status == 401 and "/.auth/login/aad" in response.text
    code = response.json()["error"]["code"]
    return code == {401: "Unauthorized", 403: "Forbidden"}[status]


def key(stack: LocalStack, role: str) -> dict[str, str]:
    return {"x-functions-key": stack.devhost.keys[role]}


# ---- the devhost playing the platform --------------------------------------------------------------------
STOREFRONTS = ("web", "kiosk")


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(tmp_path_factory.mktemp("roles"), workers=1, auth="roles", storefronts=STOREFRONTS)
    try:
        yield running
    finally:
        stop_stack(running)


@pytest.fixture(scope="module")
def processed(roles: LocalStack) -> dict[str, Any]:
    """A finished order already moved to the history, so that nothing moves it during a test."""
    order_id = roles.submit()
    order = roles.wait_terminal(order_id)
    wait_for(lambda: kept_as(roles, order_id) == "archive", timeout=30, what="the move to the history")
    return order


def test_the_keys_are_in_devhost_json(roles: LocalStack) -> None:
    state = roles.state
    storefronts = {f"storefront:{name}" for name in STOREFRONTS}
    assert state["auth"] == "roles" and set(state["keys"]) == {r.value for r in Role} | storefronts
    assert state["keys"] == roles.devhost.keys and len(set(state["keys"].values())) == len(state["keys"])


def test_every_operation_refuses_whom_it_should_and_refusals_change_nothing(
    roles: LocalStack, processed: dict[str, Any]
) -> None:
    document = roles.api.get("/api/openapi.json").json()
    calls = documented_calls(document, processed)
    assert {(c.method, c.path) for c in calls} == routes.keys()
    etag = roles.api.get(f"/api/orders/{processed['orderId']}").headers["etag"]
    store = Store(roles)
    before = store.snapshot()
    problems: list[str] = []
    for call in calls:
        rule = routes.rule(call.method, call.path)
        label = f"{call.method} {call.path}"
        if rule == access.ANYONE:
            assert send(roles, call, {}, etag).status_code == 200, label
            continue
        if rule == access.SIGNED:  # unsigned: refused whoever sends it (tests/e2e/test_waits.py signs)
            for headers in ({}, key(roles, "operator"), principal("Orders.Operator")):
                if not refused(send(roles, call, headers, etag), 401):
                    problems.append(f"{label}: an unsigned callback was not refused with 401")
            continue
        forged = principal("Orders.Operator", "Orders.Reader")
        for who, headers, status in (
            ("no credential", {}, 401),
            ("a forged principal", forged, 401),
            ("a wrong key", {"x-functions-key": "not-a-key"}, 401),
            ("the submitter", key(roles, "submitter"), None if Role.SUBMITTER in rule else 403),
            ("the reader", key(roles, "reader"), 403 if call.method == "POST" else None),
            ("the approver", key(roles, "approver"), 403 if Role.APPROVER not in rule else None),
        ):
            if status is None:
                continue
            response = send(roles, call, headers, etag)
            if not refused(response, status):
                problems.append(f"{label} for {who}: {response.status_code} {response.text[:200]}")
    store.service.close()
    assert not problems, "\n".join(problems)
    assert Store(roles).snapshot() == before, "a refused request wrote to the state store"
    assert roles.api.get(f"/api/orders/{processed['orderId']}").headers["etag"] == etag


def test_every_operation_lets_in_whom_it_should(roles: LocalStack, processed: dict[str, Any]) -> None:
    document = roles.api.get("/api/openapi.json").json()
    etag = roles.api.get(f"/api/orders/{processed['orderId']}").headers["etag"]
    problems: list[str] = []
    for call in documented_calls(document, processed):
        rule = routes.rule(call.method, call.path)
        if rule == access.ANYONE:
            continue
        for role in Role:
            if role not in rule:
                continue
            response = send(roles, call, key(roles, role), etag)
            if response.status_code in (401, 403) or response.status_code >= 500:
                problems.append(f"{call.method} {call.path} as {role}: {response.status_code}")
    assert not problems, "\n".join(problems)


def test_the_submitters_key_submits_and_reads_its_order(roles: LocalStack) -> None:
    with httpx.Client(base_url=roles.devhost.api_url, headers=key(roles, "submitter"), timeout=10) as shop:
        accepted = shop.post("/api/orders", json=new_order())
        assert accepted.status_code == 202, accepted.text
        status = shop.get(accepted.headers["location"].removeprefix(roles.devhost.api_url))
        assert status.status_code == 200 and status.json()["orderId"] == accepted.json()["orderId"]
        assert shop.get("/api/orders", params={"processState": "Pending"}).status_code == 403
        assert shop.get("/api/console").status_code == 403
        # In the address the key counts for nothing: addresses end up in logs.
        keyless = httpx.post(
            f"{roles.devhost.api_url}/api/orders",
            params={"code": roles.devhost.keys["submitter"]},
            json=new_order(),
            timeout=10,
        )
        assert keyless.status_code == 401


# ---- storefronts ------------------------------------------------------------------------------------------
def storefront(stack: LocalStack, name: str) -> httpx.Client:
    """A client holding one storefront's key."""
    return httpx.Client(base_url=stack.devhost.api_url, headers=key(stack, f"storefront:{name}"), timeout=10)


def status_bodies(
    stack: LocalStack, queue: str, wanted: set[str], timeout: float = 30
) -> dict[str, list[str]]:
    """The status messages on one queue, by the order id they carry, until every wanted id has one saying
    it is processed (the rest are kept too, so a test sees what should not be there)."""
    found: dict[str, list[str]] = {}
    with stack.servicebus() as client, client.get_queue_receiver(queue) as receiver:

        def arrived() -> bool:
            for message in receiver.receive_messages(max_message_count=100, max_wait_time=1):
                receiver.complete_message(message)
                body = json.loads(str(message))
                assert message.correlation_id == body["orderId"]
                found.setdefault(body["orderId"], []).append(body["event"])
            return all("processed" in found.get(order_id, []) for order_id in wanted)

        wait_for(arrived, timeout=timeout, interval=0.0, what=f"the status messages on {queue}")
    return found


def test_storefronts_each_keep_their_own_orders_and_status_queue_and_operators_see_both(
    roles: LocalStack,
) -> None:
    order_id = f"shop-{uuid.uuid4().hex[:12]}"
    mine = f"only-web-{uuid.uuid4().hex[:8]}"
    web, kiosk = storefront(roles, "web"), storefront(roles, "kiosk")
    with web, kiosk:
        # The same id at both: two orders, each its storefront's.
        first = web.post("/api/orders", json=new_order(order_id))
        second = kiosk.post("/api/orders", json=another_order(order_id))
        assert (first.status_code, second.status_code) == (202, 202), (first.text, second.text)
        assert first.json()["orderId"] == second.json()["orderId"] == order_id
        assert first.headers["location"].endswith(f"/api/orders/{order_id}")
        assert web.post("/api/orders", json=new_order(mine)).status_code == 202
        for client in (web, kiosk):
            body = client.get(f"/api/orders/{order_id}").json()
            assert body["orderId"] == order_id and body["input"]["orderId"] == order_id
        assert (
            web.get(f"/api/orders/{order_id}").json()["input"]
            != kiosk.get(f"/api/orders/{order_id}").json()["input"]
        )
        # Another storefront's order is answered as one that does not exist, by id or by its full name.
        unknown = kiosk.get(f"/api/orders/never-{uuid.uuid4().hex[:8]}")
        for path in (f"/api/orders/{mine}", f"/api/orders/web.{mine}"):
            refused = kiosk.get(path)
            assert refused.status_code == unknown.status_code == 404
            assert (
                set(refused.json()) == set(unknown.json()) and refused.json()["error"]["code"] == "NotFound"
            )
        assert kiosk.get("/api/orders", params={"processState": "Pending"}).status_code == 403
    # Nor the shared key, by the full name or with its dot percent-encoded: it reads orders of no storefront.
    with httpx.Client(base_url=roles.devhost.api_url, headers=key(roles, "submitter"), timeout=10) as shared:
        for path in (f"/api/orders/web.{mine}", f"/api/orders/web%2E{mine}", f"/api/orders/web%2e{mine}"):
            refused = shared.get(path)
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "NotFound", path
    # Each storefront's status messages on its own queue, under its own ids; none on the shared queue.
    for name, wanted in (("web", {order_id, mine}), ("kiosk", {order_id})):
        roles.wait_terminal(f"{name}.{order_id}")
        found = status_bodies(roles, queues.status_queue(name), wanted)
        assert set(found) == wanted, (name, found)
    # Operators (and readers) see both, under their full names, and filter by storefront.
    operator = roles.api
    for name in STOREFRONTS:
        body = operator.get(f"/api/orders/{name}.{order_id}").json()
        assert body["orderId"] == f"{name}.{order_id}" and body["storefront"] == name
    listed = operator.get(
        "/api/orders", params={"processState": "Processed", "storefront": "web", "pageSize": "100"}
    )
    ids = {item["orderId"] for item in listed.json()["items"]}
    assert f"web.{order_id}" in ids and all(i.startswith("web.") for i in ids), ids
    with roles.servicebus() as client, client.get_queue_receiver(queues.STATUS_QUEUE) as receiver:
        shared = [json.loads(str(m))["orderId"] for m in receiver.peek_messages(max_message_count=500)]
    assert not {order_id, mine, f"web.{order_id}", f"kiosk.{order_id}"} & set(shared)


# ---- the devhost trusting principal headers ----------------------------------------------------------------
@pytest.fixture(scope="module")
def trusting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(
        tmp_path_factory.mktemp("trusting"), workers=1, auth="roles", trust_principal_headers=True
    )
    try:
        yield running
    finally:
        stop_stack(running)


def test_an_entra_principal_is_what_its_app_roles_say(trusting: LocalStack) -> None:
    order_id = trusting.submit()
    order = trusting.wait_terminal(order_id)
    document = trusting.api.get("/api/openapi.json").json()
    etag = trusting.api.get(f"/api/orders/{order_id}").headers["etag"]
    problems: list[str] = []
    for call in documented_calls(document, order):
        rule = routes.rule(call.method, call.path)
        if isinstance(rule, str):  # anyone; or signed, whose refusals are tested above
            continue
        label = f"{call.method} {call.path}"
        reader = send(trusting, call, principal("Orders.Reader"), etag)
        if (refused(reader, 403) if call.method == "POST" else reader.status_code not in (401, 403)) is False:
            problems.append(f"{label} as an Entra reader: {reader.status_code}")
        nobody = send(trusting, call, principal("Some.Other.Role"), etag)
        if not refused(nobody, 403):
            problems.append(f"{label} signed in without a role of this app: {nobody.status_code}")
        operator = send(trusting, call, principal("Orders.Operator"), etag)
        if operator.status_code in (401, 403) or operator.status_code >= 500:
            problems.append(f"{label} as an Entra operator: {operator.status_code}")
    assert not problems, "\n".join(problems)


def test_the_audit_names_the_principal_by_name_and_object_id(trusting: LocalStack) -> None:
    hung = trusting.hung_calls(FIRST_STEP.agent)
    trusting.faults(**{FIRST_STEP.agent: HANG})
    try:
        order_id = trusting.submit()
        trusting.wait_state(order_id, lambda o: o["steps"][0]["state"] == "Running", what="a running step")
        trusting.wait_hung(FIRST_STEP.agent, hung)
        etag = trusting.api.get(f"/api/orders/{order_id}").headers["etag"]
        operator = {**principal("Orders.Operator", name="grace@contoso.example"), "If-Match": etag}
        with httpx.Client(base_url=trusting.devhost.api_url, timeout=10) as client:
            extended = client.post(
                f"/api/orders/{order_id}/steps/{FIRST_STEP.name}/extend",
                json={"seconds": 60, "note": "slow today"},
                headers=operator,
            )
            assert extended.status_code == 202, extended.text
            trail = client.get(f"/api/orders/{order_id}/audit", headers=principal("Orders.Reader"))
        [entry] = trail.json()["items"]
        assert entry["actor"] == f"user:grace@contoso.example oid:{OBJECT_ID}"
        assert entry["action"] == "extend" and entry["note"] == "slow today"
    finally:
        trusting.clear_faults()
    cancelled = trusting.act(order_id, "cancel")
    assert cancelled.status_code == 202, cancelled.text
