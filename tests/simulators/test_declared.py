"""The simulators follow the services' declaration: every resource of every declared service is served, with
its body model, its answers and its rejection reason, and the controls list every declared service.

These tests read the declaration (``orders.catalog.SERVICES``) rather than name a service, so a service or
resource added there is covered here without a change.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from pydantic.alias_generators import to_camel

from engine.agent import Action
from engine.messages import AgentRequest
from engine.workflow import StepDefinition, WorkflowDefinition
from orders.catalog import CATALOG, SERVICES
from orders.models import order_input
from orders.services.client import RemoteServices, apply_path, undo_path
from orders.services.declaration import ItemsBody, Resource, ServiceDefinition, ServiceResult
from simulators.app import CONTROLS, resource_specs
from simulators.hosted import ROUTE_PREFIX, is_control_path, is_service_path
from simulators.ledger_check import ledger_report
from tests.simulators.conftest import ServedSimulators
from tests.simulators.helpers import (
    FAULT_DEFAULTS,
    RESULT_NAMES,
    apply_body,
    assert_error,
    ledger,
    set_faults,
    stats,
    undo_body,
)

RESOURCES = [(service, resource) for service in SERVICES for resource in service.resources]
IDS = [f"{service.name}-{resource.collection}" for service, resource in RESOURCES]
UNDOABLE = [(service, resource) for service, resource in RESOURCES if resource.undo is not None]
UNDOABLE_IDS = [f"{service.name}-{resource.collection}" for service, resource in UNDOABLE]
FINAL = [(service, resource) for service, resource in RESOURCES if resource.undo is None]
FINAL_IDS = [f"{service.name}-{resource.collection}" for service, resource in FINAL]
NAMES = [service.name for service in SERVICES]


def body(resource: Resource) -> dict[str, Any]:
    """The body the agents' client sends for ``resource``, built by the declaration's own model."""
    return apply_body(resource)


@pytest.mark.parametrize(("service", "resource"), UNDOABLE, ids=UNDOABLE_IDS)
def test_every_resource_that_can_be_undone_is_applied_replayed_and_undone_at_the_clients_paths(
    client: httpx.Client, service: ServiceDefinition, resource: Resource
) -> None:
    path, key = apply_path(service, resource), f"order-1:{resource.apply}"
    headers = {"Idempotency-Key": key}

    first = client.post(path, json=body(resource), headers=headers)
    replay = client.post(path, json=body(resource), headers=headers)
    undone = client.post(undo_path(service, resource, key), json=undo_body(resource, key))

    assert first.status_code == 201, first.text
    assert replay.status_code == 200, replay.text
    # The declared result values, beside the answer's own fields; the replay answers the same.
    answer = {**resource.simulated(key), "id": key, "orderId": "order-1", "status": resource.applied}
    assert first.json() == replay.json() == answer
    assert undone.status_code == 200, undone.text
    assert undone.json() == {"id": key, "status": resource.undone}
    book = ledger(client)
    (recorded,) = book[service.name].values()
    assert recorded["result"] == resource.simulated(key)
    assert (recorded["applied"], recorded["compensated"]) == (1, 1)
    # The bodies as received (an undo names what its apply returned).
    assert recorded["carried"] == body(resource)
    assert recorded["undoCarried"] == undo_body(resource, key)
    # The change numbers say the undo came after the apply.
    assert recorded["compensatedSeq"] > recorded["appliedSeq"]
    assert all(entries == {} for name, entries in book.items() if name != service.name)
    assert stats(client)[service.name]["calls"] == 3


@pytest.mark.parametrize(("service", "resource"), FINAL, ids=FINAL_IDS)
def test_a_resource_that_cannot_be_undone_has_no_undo_route(
    client: httpx.Client, service: ServiceDefinition, resource: Resource
) -> None:
    key = f"order-1:{resource.apply}"
    headers = {"Idempotency-Key": key}
    assert client.post(apply_path(service, resource), json=body(resource), headers=headers).status_code == 201

    # Where an undo route would be, with every undo action any resource declares, with a body or none.
    undos = sorted({r.undo for s in SERVICES for r in s.resources if r.undo} | {"undo"})
    for undo in undos:
        path = f"{apply_path(service, resource)}/{quote(key, safe='')}/{undo}"
        for sent in (None, {"orderId": "order-1"}):
            response = client.post(path, json=sent)
            assert response.status_code in (404, 405), (undo, response.text)

    (recorded,) = ledger(client)[service.name].values()
    assert (recorded["applied"], recorded["compensated"], recorded["undoCarried"]) == (1, 0, None)
    # Nothing reached the service but the apply.
    assert stats(client)[service.name]["calls"] == 1


@pytest.mark.parametrize(("service", "resource"), RESOURCES, ids=IDS)
def test_every_declared_resource_rejects_with_its_reason(
    client: httpx.Client, service: ServiceDefinition, resource: Resource
) -> None:
    set_faults(client, {service.name: {"permanentRate": 1}})

    response = client.post(
        apply_path(service, resource), json=body(resource), headers={"Idempotency-Key": "refused"}
    )

    assert assert_error(response, 422, "Rejected") == resource.rejection
    assert ledger(client)[service.name] == {}


@pytest.mark.parametrize(("service", "resource"), RESOURCES, ids=IDS)
def test_every_declared_resource_validates_with_its_body_model(
    shared_client: httpx.Client, service: ServiceDefinition, resource: Resource
) -> None:
    """Each required field of the body model, left out, is a 400; nothing is applied."""
    required = [to_camel(name) for name, field in resource.body.model_fields.items() if field.is_required()]
    assert "orderId" in required
    for name in required:
        incomplete = {k: v for k, v in body(resource).items() if k != name}
        response = shared_client.post(
            apply_path(service, resource), json=incomplete, headers={"Idempotency-Key": f"missing-{name}"}
        )
        assert name in assert_error(response, 400, "InvalidBody")
    assert ledger(shared_client)[service.name] == {}


def test_the_controls_list_every_declared_service(client: httpx.Client) -> None:
    assert list(client.get("/faults").json()) == NAMES
    assert list(stats(client)) == NAMES
    assert list(ledger(client)) == NAMES
    # Each declared service takes a fault profile of its own.
    profile = set_faults(client, {name: {"latencyMs": index} for index, name in enumerate(NAMES)})
    assert profile == {name: {**FAULT_DEFAULTS, "latencyMs": index} for index, name in enumerate(NAMES)}


def test_faults_for_a_service_not_declared_are_refused(shared_client: httpx.Client) -> None:
    undeclared = "-".join(NAMES)
    message = assert_error(shared_client.post("/faults", json={undeclared: {}}), 400, "InvalidFaults")
    assert "not a declared service" in message


RUNS = [
    (workflow, index, undo)
    for workflow in CATALOG.workflows
    for index in range(len(workflow.examples()))
    for undo in (False, True)
]


async def run_order(
    actions: dict[str, dict[str, Action]], workflow: WorkflowDefinition, example: int, undo: bool
) -> dict[str, Any]:
    """Run an order of ``workflow``'s example ``example`` through the agents' actions as the engine would:
    each step with the document of the input and the results so far, left out when its condition fails;
    with ``undo``, then every step that can be undone, last first, with its own result too. Returns the
    order as ``GET /api/orders/{id}`` would show it."""
    order_id = f"client-{workflow.name}-{workflow.version}-{example}-{'undone' if undo else 'done'}"
    given = order_input(workflow, workflow.examples()[example])
    views: list[dict[str, Any]] = []

    def results(upto: int) -> dict[str, Any]:
        return {k: v for view in views[: upto + 1] for k, v in (view["result"] or {}).items()}

    def request(index: int, compensating: bool) -> AgentRequest:
        step = workflow.steps[index]
        action = step.compensation if compensating else step.action
        assert action is not None
        return AgentRequest(
            order_id=order_id,
            workflow=workflow.name,
            workflow_version=workflow.version,
            step=step.name,
            step_index=index,
            attempt=1,
            compensating=compensating,
            action=action,
            idempotency_key=f"{order_id}:{step.name}",
            complete_by=datetime.now(UTC) + timedelta(seconds=30),
            # An apply reads the results of the steps before it; an undo, its own too.
            payload={"input": given, "results": results(index if compensating else index - 1)},
        )

    for index, step in enumerate(workflow.steps):
        if step.when is not None and not step.when.holds({"input": given, "results": results(index - 1)}):
            views.append({"name": step.name, "state": "LeftOut", "result": None})
            continue
        if not step.calls:
            views.append({"name": step.name, "state": "Completed", "result": None})  # a wait: no call
            continue
        result = await actions[step.call_agent][step.action or ""](request(index, False), 5.0)
        views.append({"name": step.name, "state": "Completed", "result": result})
    for index in reversed(range(len(workflow.steps))) if undo else ():
        step = workflow.steps[index]
        if views[index]["state"] == "Completed" and step.compensation is not None:
            assert await actions[step.call_agent][step.compensation](request(index, True), 5.0) == {}
            views[index]["state"] = "Compensated"
    return {
        "orderId": order_id,
        "workflow": workflow.name,
        "workflowVersion": workflow.version,
        "processState": "Compensated" if undo else "Processed",
        "steps": views,
    }


def test_the_agents_client_runs_every_workflow_against_the_simulators_and_the_ledger_check_agrees(
    simulators: ServedSimulators, client: httpx.Client
) -> None:
    """The agents' own actions, as the workflows name them, on each example input, run to the end and
    undone: each apply is recorded once with the values it returned, each body carries the values the
    steps before returned, and the ledger check finds every rule kept."""

    async def run() -> list[dict[str, Any]]:
        remote = RemoteServices(SERVICES, dict.fromkeys(NAMES, simulators.base_url))
        try:
            actions = remote.actions()
            return [await run_order(actions, workflow, example, undo) for workflow, example, undo in RUNS]
        finally:
            await remote.client.aclose()

    orders = asyncio.run(run())

    book = ledger(client)
    report = ledger_report(orders, book)
    assert report.problems == []
    assert report.orders == len(RUNS)
    # Every value a call carried was compared with the value returned; each run's steps are in the ledger
    # as they ran (applied with the values the order holds, undone if undone, never called if left out).
    carried = [
        value
        for entries in book.values()
        for entry in entries.values()
        for values in (entry["carried"], entry["undoCarried"] or {})
        for name, value in values.items()
        if name in RESULT_NAMES and value is not None
    ]
    assert report.checked == len(carried)
    if any(resource.result is not None for _, resource in RESOURCES):
        assert report.checked > 0
    for order in orders:
        workflow = CATALOG.find(order["workflow"], order["workflowVersion"])
        assert workflow is not None
        for step, view in zip(workflow.steps, order["steps"], strict=True):
            if not step.calls:
                continue
            recorded = book[step.call_agent].get(f"{order['orderId']}:{step.name}")
            if view["state"] == "LeftOut":
                assert recorded is None
                continue
            assert recorded is not None and recorded["result"] == view["result"], (order, recorded)
            assert recorded["compensated"] == int(view["state"] == "Compensated")
    assert sum(len(entries) for entries in book.values()) == sum(
        view["state"] != "LeftOut" and step.calls
        for order in orders
        for step, view in zip(_steps(order), order["steps"], strict=True)
    )


@pytest.mark.parametrize(("service", "resource"), RESOURCES, ids=IDS)
def test_the_hosted_app_forwards_every_declared_resource_as_a_service_call(
    service: ServiceDefinition, resource: Resource
) -> None:
    paths = [apply_path(service, resource)]
    paths += [undo_path(service, resource, "order-1:step")] if resource.undo is not None else []
    for path in paths:
        assert is_service_path(ROUTE_PREFIX + path) and not is_control_path(ROUTE_PREFIX + path), path


def _service(name: str) -> ServiceDefinition:
    resource = Resource(
        collection="things",
        apply="make",
        undo="unmake",
        body=ItemsBody,
        applied="made",
        undone="unmade",
        rejection="no",
    )
    return ServiceDefinition(name=name, description="a service of a test", resources=(resource,))


def test_a_service_cannot_take_the_name_of_a_control() -> None:
    assert [spec.collection for spec in resource_specs([_service("widgets")])] == ["/widgets/things"]
    for control in CONTROLS:
        with pytest.raises(ValueError, match=control):
            resource_specs([_service(control)])


def test_a_result_cannot_take_the_name_of_a_field_of_every_answer() -> None:
    class Status(ServiceResult):
        status: str

    resource = Resource(
        collection="things", apply="make", body=ItemsBody, result=Status, applied="made", rejection="no"
    )
    service = ServiceDefinition(name="widgets", description="a service of a test", resources=(resource,))
    with pytest.raises(ValueError, match="status"):
        resource_specs([service])


def _steps(order: dict[str, Any]) -> tuple[StepDefinition, ...]:
    workflow = CATALOG.find(order["workflow"], order["workflowVersion"])
    assert workflow is not None
    return workflow.steps
