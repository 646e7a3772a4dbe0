"""The simulators follow the services' declaration: every resource of every declared service is served, with
its body model, its answers and its rejection reason, and the controls list every declared service.

These tests read the declaration (``orders.catalog.SERVICES``) rather than name a service, so a service or
resource added there is covered here without a change.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic.alias_generators import to_camel

from engine.messages import AgentRequest
from engine.workflow import StepDefinition, WorkflowDefinition
from orders.catalog import CATALOG, SERVICES
from orders.services.client import RemoteServices, apply_path, undo_path
from orders.services.declaration import ItemsBody, Resource, ServiceDefinition
from simulators.app import CONTROLS, resource_specs
from simulators.hosted import ROUTE_PREFIX, is_control_path, is_service_path
from tests.simulators.conftest import RunningSimulators
from tests.simulators.helpers import FAULT_DEFAULTS, assert_error, ledger, set_faults, stats

ORDER = {
    "orderId": "order-1",
    "items": [
        {"sku": "SKU-1", "quantity": 2, "unitPrice": 9.5},
        {"sku": "SKU-2", "quantity": 1, "unitPrice": 3},
    ],
    "currency": "EUR",
}
RESOURCES = [(service, resource) for service in SERVICES for resource in service.resources]
IDS = [f"{service.name}-{resource.collection}" for service, resource in RESOURCES]
NAMES = [service.name for service in SERVICES]


def body(resource: Resource, order_id: str = "order-1") -> dict[str, Any]:
    """The body the agents' client sends for ``resource``, built by the declaration's own model."""
    return resource.body.from_order(order_id, ORDER).wire()


@pytest.mark.parametrize(("service", "resource"), RESOURCES, ids=IDS)
def test_every_declared_resource_is_applied_replayed_and_undone_at_the_clients_paths(
    client: httpx.Client, service: ServiceDefinition, resource: Resource
) -> None:
    path, key = apply_path(service, resource), f"order-1:{resource.apply}"
    headers = {"Idempotency-Key": key}

    first = client.post(path, json=body(resource), headers=headers)
    replay = client.post(path, json=body(resource), headers=headers)
    undone = client.post(undo_path(service, resource, key))

    assert first.status_code == 201, first.text
    assert replay.status_code == 200, replay.text
    assert first.json() == replay.json() == {"id": key, "orderId": "order-1", "status": resource.applied}
    assert undone.status_code == 200, undone.text
    assert undone.json() == {"id": key, "status": resource.undone}
    book = ledger(client)
    assert book[service.name] == {key: {"orderId": "order-1", "applied": 1, "compensated": 1}}
    assert all(entries == {} for name, entries in book.items() if name != service.name)
    assert stats(client)[service.name]["calls"] == 3


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


def test_the_agents_client_runs_every_step_of_every_workflow_against_the_simulators(
    simulators: RunningSimulators, client: httpx.Client
) -> None:
    """The agents' own actions, as the workflows name them: each apply is recorded once and undone once."""
    steps = [(workflow, step) for workflow in CATALOG.workflows for step in workflow.steps]

    def key(workflow: WorkflowDefinition, step: StepDefinition) -> str:
        # One key per step of each version: versions may share a step, and each run is its own effect.
        return f"order-1:{workflow.name}-{workflow.version}:{step.name}"

    async def run() -> None:
        remote = RemoteServices(SERVICES, dict.fromkeys(NAMES, simulators.base_url))
        actions = remote.actions()
        try:
            for workflow, step in steps:
                assert step.compensation is not None
                request = AgentRequest(
                    order_id="order-1",
                    workflow=workflow.name,
                    workflow_version=workflow.version,
                    step=step.name,
                    step_index=0,
                    attempt=1,
                    action=step.action,
                    idempotency_key=key(workflow, step),
                    complete_by=datetime.now(UTC) + timedelta(seconds=30),
                    payload={"input": ORDER, "results": {}},
                )
                applied = await actions[step.agent][step.action](request, 5.0)
                undo = request.model_copy(update={"action": step.compensation, "compensating": True})
                undone = await actions[step.agent][step.compensation](undo, 5.0)
                resource, _ = next(s for s in SERVICES if s.name == step.agent).resource(step.action)
                assert applied["status"] == resource.applied and undone["status"] == resource.undone
        finally:
            await remote.client.aclose()

    asyncio.run(run())

    book = ledger(client)
    for workflow, step in steps:
        entry = book[step.agent][key(workflow, step)]
        assert entry == {"orderId": "order-1", "applied": 1, "compensated": 1}, (workflow.name, step.name)
    assert sum(len(entries) for entries in book.values()) == len(steps)


@pytest.mark.parametrize(("service", "resource"), RESOURCES, ids=IDS)
def test_the_hosted_app_forwards_every_declared_resource_as_a_service_call(
    service: ServiceDefinition, resource: Resource
) -> None:
    for path in (apply_path(service, resource), undo_path(service, resource, "order-1:step")):
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
