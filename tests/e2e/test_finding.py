"""Finding and explaining orders on the local stack: search by a declared input field (a customer), by
workflow and version, by time of submission, by the step an order is at and for how long, with and without
the state, page by page; and every call an order's steps made, shown with the body its service received
(checked against the simulators' ledger), sensitive fields redacted and never stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.data.tables import TableServiceClient

from devhost import azurite
from orders.catalog import CATALOG
from simulators.ledger_check import ledger_report
from tests.e2e.conftest import (
    DEFAULT_WORKFLOW,
    FIRST_STEP,
    WORKFLOWS,
    LocalStack,
    start_stack,
    stop_stack,
)
from tests.support import wait_for

FIELD = DEFAULT_WORKFLOW.searchable[0] if DEFAULT_WORKFLOW.searchable else None
OTHER = next((w for w in WORKFLOWS if w.name != DEFAULT_WORKFLOW.name and FIELD in w.searchable), None)
HANG = {"hangRate": 1, "hangMs": 60_000}

pytestmark = pytest.mark.skipif(FIELD is None, reason="the default workflow declares no searchable field")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(tmp_path_factory.mktemp("finding"), workers=2)
    try:
        yield running
    finally:
        stop_stack(running)


def found(stack: LocalStack, page_size: int = 50, **query: Any) -> list[str]:
    """Every order id a search returns, following its continuation tokens; none twice."""
    ids: list[str] = []
    token = None
    while True:
        params = {**query, "pageSize": page_size, **({"continuationToken": token} if token else {})}
        reply = stack.api.get("/api/orders", params=params)
        assert reply.status_code == 200, reply.text
        page = reply.json()
        assert len(page["items"]) <= page_size
        ids += [item["orderId"] for item in page["items"]]
        token = page["continuationToken"]
        if not token:
            assert len(ids) == len(set(ids)), ids
            return ids


def test_orders_are_found_by_customer_workflow_and_state_and_only_those(stack: LocalStack) -> None:
    customer, other = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    mine = [stack.submit(**{FIELD: customer}) for _ in range(3)]
    theirs = stack.submit(**{FIELD: other})
    returned = stack.submit(workflow=OTHER, **{FIELD: customer}) if OTHER is not None else None
    everyone = [*mine, theirs, *([returned] if returned else [])]
    for order_id in everyone:
        stack.wait_terminal(order_id)

    expected = {*mine, *([returned] if returned else [])}
    assert set(found(stack, **{FIELD: customer})) == expected
    # A page of one at a time finds the same, each once.
    assert set(found(stack, page_size=1, **{FIELD: customer})) == expected
    assert found(stack, **{FIELD: other}) == [theirs]
    assert set(found(stack, workflow=DEFAULT_WORKFLOW.name, **{FIELD: customer})) == set(mine)
    if OTHER is not None:
        assert found(stack, workflow=OTHER.name, **{FIELD: customer}) == [returned]
    states = {order_id: stack.order(order_id)["processState"] for order_id in expected}
    for state in set(states.values()):
        wanted = {order_id for order_id, s in states.items() if s == state}
        assert set(found(stack, processState=state, **{FIELD: customer})) == wanted
    assert found(stack, processState="Error", **{FIELD: customer}) == []
    assert found(stack, **{FIELD: f"nobody-{uuid.uuid4().hex}"}) == []


def test_orders_are_found_by_time_of_submission_and_version(stack: LocalStack) -> None:
    start = datetime.now(UTC)
    ids = [stack.submit(), stack.submit()]
    end = datetime.now(UTC)
    later = stack.submit()
    for order_id in [*ids, later]:
        stack.wait_terminal(order_id)

    window = {"submittedFrom": start.isoformat(), "submittedTo": end.isoformat()}
    assert set(found(stack, **window)) == set(ids)
    version = DEFAULT_WORKFLOW.version
    assert set(found(stack, workflow=DEFAULT_WORKFLOW.name, workflowVersion=version, **window)) == set(ids)
    assert found(stack, workflow=DEFAULT_WORKFLOW.name, workflowVersion=version + 1, **window) == []
    assert later in found(stack, submittedFrom=end.isoformat())
    assert later not in found(stack, submittedTo=end.isoformat(), workflow=DEFAULT_WORKFLOW.name)


def test_an_order_stuck_at_a_step_is_found_and_its_recovery_shown(stack: LocalStack) -> None:
    customer = f"c-{uuid.uuid4().hex[:8]}"
    service = FIRST_STEP.call_agent
    hung_before = stack.hung_calls(service)
    stack.faults(**{service: HANG})
    try:
        order_id = stack.submit(**{FIELD: customer})
        stack.wait_hung(service, hung_before)
        at_step = {"step": FIRST_STEP.name}
        wait_for(lambda: order_id in found(stack, atStepSeconds=1, **at_step), timeout=20, what="at its step")
        assert order_id in found(stack, processState="Processing", **at_step) + found(
            stack, processState="Pending", **at_step
        )
        assert found(stack, atStepSeconds=3600, **at_step) == []
        # With the customer: the key's entries, then the state's criteria.
        assert found(stack, atStepSeconds=1, **at_step, **{FIELD: customer}) == [order_id]
        summary = stack.api.get("/api/orders", params={FIELD: customer}).json()["items"][0]
        assert summary["currentStep"] == FIRST_STEP.name and summary["atStepSince"] is not None

        def recovered() -> dict[str, Any] | None:
            calls = stack.order(order_id)["steps"][0]["calls"]
            return next((c for c in calls if c.get("recovery")), None)

        entry = wait_for(recovered, timeout=30, what="the Supervisor's recovery in the step's calls")
        assert entry["outcome"] == "timed out" and entry["recovery"].startswith("failure 1: again at")
        assert entry["attempt"] == 1 and entry["dispatched"] <= entry["ended"]
    finally:
        stack.clear_faults()
    order = stack.wait_terminal(order_id, timeout=90)
    calls = order["steps"][0]["calls"]
    # The timed-out dispatch, then the one that went through, each with its own attempt.
    assert [c["attempt"] for c in calls] == list(range(1, len(calls) + 1)) and len(calls) >= 2
    assert calls[-1]["outcome"] == "succeeded" and calls[-1]["status"] in (200, 201)
    assert order_id not in found(stack, **at_step)  # finished: at no step


def test_an_orders_calls_show_the_bodies_received_with_sensitive_fields_redacted(stack: LocalStack) -> None:
    fields = DEFAULT_WORKFLOW.input.model_fields if DEFAULT_WORKFLOW.input else {}
    if not any(f.alias == "paymentToken" for f in fields.values()):
        pytest.skip("the default workflow's input carries no payment token")
    token = f"tok-{uuid.uuid4().hex}"
    order_id = stack.submit(paymentToken=token)
    order = stack.wait_terminal(order_id)
    assert order["processState"] == "Processed"

    report = ledger_report([order], stack.ledger())
    assert report.problems == []
    called = [s for s in order["steps"] if s["calls"] and s["calls"][-1]["kind"] == "call"]
    assert report.calls >= len(called) > 0 and report.redacted >= 1
    for step in called:
        call = step["calls"][-1]
        assert call["instance"] and call["started"] and call["ended"] and call["tries"] >= 1
        assert call["dispatched"] <= call["started"] <= call["ended"]
    charged = [c["body"] for s in called for c in s["calls"] if "paymentToken" in (c["body"] or {})]
    assert charged and all(body["paymentToken"] == "[redacted]" for body in charged)
    # The service received the token; nothing the store keeps holds it but the order's own input.
    entries = stack.step_entries(order_id)
    assert any(
        entry and (entry.get("carried") or {}).get("paymentToken") == token for entry in entries.values()
    )
    assert holding(stack, token) == [], "the token is stored outside the order's input"


def holding(stack: LocalStack, text: str) -> list[str]:
    """Where ``text`` is stored in the devhost's tables, outside an order's input (``Body`` chunks)."""
    service = TableServiceClient.from_connection_string(
        azurite.table_connection_string(stack.devhost.azurite_port)
    )
    places = []
    for table in service.list_tables():
        if not table.name.startswith("orders") or table.name == "orderssim":
            continue
        for entity in service.get_table_client(table.name).list_entities():
            for name, value in entity.items():
                if isinstance(value, str) and text in value and not name.startswith("Body"):
                    places.append(f"{table.name}/{entity['RowKey']}/{name}")
    return places


def test_a_search_the_route_cannot_take_is_refused_with_the_reason(stack: LocalStack) -> None:
    for params, reason in (
        ({"customerID": "x"}, "unknown query parameter customerID"),
        ({"step": "no-such-step"}, "no deployed workflow has a step no-such-step"),
        ({"submittedFrom": "yesterday"}, "submittedFrom must be a time"),
        ({"submittedFrom": "2026-01-01T00:00:00"}, "must say its offset"),
        ({"workflowVersion": "two"}, "workflowVersion must be a whole number"),
        ({"atStepSeconds": "-1"}, "atStepSeconds must be a number"),
        ({"workflow": "no-such-workflow"}, "workflow must be one of"),
        ({FIELD: "x", "processState": "Done"}, "processState must be one of"),
        ({FIELD: "x", "pageSize": "0"}, "pageSize"),
        ({FIELD: "x", "continuationToken": "not-a-token"}, ""),
    ):
        reply = stack.api.get("/api/orders", params=params)
        assert reply.status_code == 400, (params, reply.text)
        assert reason in reply.json()["error"]["message"], (params, reply.json())
    assert CATALOG.default == DEFAULT_WORKFLOW.name
