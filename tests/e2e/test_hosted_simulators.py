"""A deployment with no remote services: the app serves the simulators itself and still processes orders.

The devhost checks host keys here as Azure does: the simulators' controls need the master key. Their
service calls need SIMULATORS_KEY (the agents send it), which the simulators check; a host function key
is not enough. The ledger is the table next to the state table, as on every instance of a deployed app.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from azure.data.tables import TableClient

from devhost import azurite
from engine.workflow import WorkflowDefinition
from orders import catalog
from orders.models import order_input
from orders.services.client import apply_path, undo_path
from orders.services.declaration import Document
from servicebus_emulator.launcher import free_port
from simulators.ledger_check import check_ledger
from simulators.table_ledger import ledger_table_name
from tests.e2e.conftest import (
    DEFAULT_WORKFLOW,
    FIRST_STEP,
    LAST_STEP,
    WORKFLOWS,
    LocalStack,
    position,
    runs,
    start_stack,
    stop_stack,
    straight_input,
)
from tests.support import service_urls

FUNCTION_KEY = f"function-{uuid.uuid4().hex}"
SIMULATORS_KEY = f"simulators-{uuid.uuid4().hex}"
MASTER_KEY = f"master-{uuid.uuid4().hex}"
MASTER = {"x-functions-key": MASTER_KEY}
# A service call as an agent makes it: the first step's, with its body built from an order.
SERVICE = next(service for service in catalog.SERVICES if service.name == FIRST_STEP.agent)
RESOURCE, _ = SERVICE.resource(FIRST_STEP.action)
CALL = RESOURCE.body.build(
    Document("o-keys", order_input(DEFAULT_WORKFLOW, straight_input(DEFAULT_WORKFLOW, "o-keys")), {})
).wire()


@pytest.fixture(scope="module")
def self_contained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    port = free_port()
    own = f"http://127.0.0.1:{port}/api/sim"
    env = {"ENABLE_SIMULATORS": "true", **service_urls(own), "SIMULATORS_KEY": SIMULATORS_KEY}
    stack = start_stack(
        tmp_path_factory.mktemp("devhost-hosted"),
        workers=1,
        extra_env=env,
        port=port,
        function_key=FUNCTION_KEY,
        master_key=MASTER_KEY,
    )
    try:
        yield stack
    finally:
        stop_stack(stack)


def ledger_rows(stack: LocalStack) -> list[dict[str, Any]]:
    """The hosted simulators' ledger table, read straight from the stack's Azurite."""
    connection = azurite.table_connection_string(stack.devhost.azurite_port)
    table = TableClient.from_connection_string(connection, ledger_table_name("orders"))
    return [dict(row) for row in table.list_entities()]


def test_the_simulators_take_only_the_right_keys(self_contained: LocalStack) -> None:
    with httpx.Client(base_url=self_contained.devhost.api_url, timeout=10) as anonymous:

        def call(headers: dict[str, str] | None, key: str) -> int:
            headers = {"Idempotency-Key": key, **(headers or {})}
            path = f"/api/sim{apply_path(SERVICE, RESOURCE)}"
            return anonymous.post(path, json=CALL, headers=headers).status_code

        assert call(None, "k-none") == 401
        assert call({"x-simulators-key": "not-the-key"}, "k-wrong") == 401
        assert call({"x-functions-key": FUNCTION_KEY}, "k-host") == 401, (
            "a host key is not the simulators key"
        )
        assert call({"x-functions-key": MASTER_KEY}, "k-master") == 401
        assert call({"x-simulators-key": SIMULATORS_KEY}, "k-function") == 201
        undo = anonymous.post(
            f"/api/sim{undo_path(SERVICE, RESOURCE, 'k-function')}",
            headers={"x-simulators-key": SIMULATORS_KEY},
        )
        assert undo.status_code == 200, undo.text

        function = {"x-functions-key": FUNCTION_KEY}
        for method, path in (("GET", "ledger"), ("GET", "stats"), ("GET", "faults"), ("POST", "faults")):
            body = {} if method == "POST" else None
            assert anonymous.request(method, f"/api/sim/{path}", json=body).status_code == 401, path
            denied = anonymous.request(method, f"/api/sim/{path}", json=body, headers=function)
            assert denied.status_code == 401, f"{path} must refuse a function key"
            allowed = anonymous.request(method, f"/api/sim/{path}", json=body, headers=MASTER)
            assert allowed.status_code == 200, f"{path}: {allowed.text}"
        # The service function forwards only the services' paths: a function key reaches no control.
        assert anonymous.post("/api/sim/faults/x/y", json={}, headers=function).status_code == 404
        assert anonymous.get("/api/sim/ledger", params={"code": MASTER_KEY}).status_code == 200

    # Refused calls never reached the simulators.
    keys = {row["Key"] for row in ledger_rows(self_contained)}
    assert "k-function" in keys and not keys & {"k-none", "k-wrong", "k-host", "k-master"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_orders_are_processed_against_the_apps_own_simulators(
    self_contained: LocalStack, workflow: WorkflowDefinition
) -> None:
    order_id = self_contained.submit(workflow=workflow)
    assert self_contained.wait_terminal(order_id)["processState"] == "Processed"
    hosted = self_contained.api.get("/api/sim/ledger", headers=MASTER).json()
    order = self_contained.order(order_id)
    assert check_ledger([order], hosted) == []
    # The effects are in the ledger table, where every instance of the app would see them.
    rows = [row for row in ledger_rows(self_contained) if row["OrderId"] == order_id]
    assert sorted(
        (row["PartitionKey"], row["Key"], row["Applied"], row["Compensated"]) for row in rows
    ) == sorted((step.agent, f"{order_id}:{step.name}", 1, 0) for step in runs(workflow, order_id))
    # With the values each service returned, as the order holds them.
    held = {step["name"]: step["result"] for step in order["steps"] if step["result"]}
    recorded = {row["Key"].split(":", 1)[1]: json.loads(row["Result"]) for row in rows}
    assert {name: recorded[name] for name in held} == held
    # The separate simulator process was not used.
    assert not any(e["orderId"] == order_id for s in self_contained.ledger().values() for e in s.values())


def test_the_hosted_simulators_take_fault_profiles(self_contained: LocalStack) -> None:
    failing = LAST_STEP.agent  # the last step fails: every step before it is undone
    response = self_contained.api.post(
        "/api/sim/faults", json={failing: {"permanentRate": 1}}, headers=MASTER
    )
    assert response.status_code == 200, response.text
    try:
        order_id = self_contained.submit()
        assert self_contained.wait_terminal(order_id)["processState"] == "Compensated"
        rows = [row for row in ledger_rows(self_contained) if row["OrderId"] == order_id]
        assert {(row["PartitionKey"], row["Key"]): row["Compensated"] for row in rows} == {
            (step.agent, f"{order_id}:{step.name}"): int(step.compensation is not None)
            for step in DEFAULT_WORKFLOW.steps[: position(LAST_STEP)]
            if step
            in runs(DEFAULT_WORKFLOW, order_id)  # the calls it made: a wait, or a step left out, made none
        }
    finally:
        self_contained.api.post("/api/sim/faults", json={failing: {}}, headers=MASTER)
