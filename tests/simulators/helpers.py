"""The simulators' HTTP contract as the tests see it, for every declared service.

The services, their routes, answers and rejection reasons come from the declaration
(``orders.catalog.SERVICES``), so these tests hold for whatever services a deployment declares; the example
services' own contract, written out by hand, is checked in ``tests/examples/test_simulated_services.py``.
Tests that need services in distinct roles take them by position among the services with a resource that
can be undone: ``FIRST``, ``SECOND`` and ``LAST``. Bodies are built as the agents' client builds them, from
the documents an order of each workflow's first example gives each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from engine.workflow import StepDefinition, WorkflowDefinition
from orders.catalog import CATALOG
from orders.catalog import SERVICES as DECLARED
from orders.models import order_input
from orders.services.client import apply_path
from orders.services.declaration import Document, Resource, ServiceDefinition

ORDER_ID = "order-1"


def resource_of(step: StepDefinition) -> Resource:
    """The declared resource a step applies."""
    service = next(s for s in DECLARED if s.name == step.agent)
    return service.resource(step.action)[0]


def _documents() -> dict[int, Document]:
    """For each resource (by id), the document its apply is built from: that of the first step that
    applies it, in an order ``order-1`` of its workflow's first example, every step before it having
    returned what the simulators return (a step its condition leaves out returns nothing)."""
    found: dict[int, Document] = {}
    for workflow in CATALOG.workflows:
        found.update({key: value for key, value in _walk(workflow).items() if key not in found})
    return found


def _walk(workflow: WorkflowDefinition) -> dict[int, Document]:
    documents: dict[int, Document] = {}
    given = order_input(workflow, workflow.examples()[0])
    results: dict[str, Any] = {}
    for step in workflow.steps:
        if not step.calls:
            continue  # a wait calls no service
        resource = resource_of(step)
        before = dict(results)
        if step.when is None or step.when.holds({"input": given, "results": before}):
            results.update(resource.simulated(f"{ORDER_ID}:{step.name}"))
        documents.setdefault(id(resource), Document(ORDER_ID, given, before))
    return documents


DOCUMENTS = _documents()
# For a resource no step applies: the first workflow's first example, and no results.
_FIRST = CATALOG.workflows[0]
UNUSED = Document(ORDER_ID, order_input(_FIRST, _FIRST.examples()[0]), {})


def _document(resource: Resource) -> Document:
    return DOCUMENTS.get(id(resource), UNUSED)


def apply_body(resource: Resource) -> dict[str, Any]:
    """The body the agents' client sends to apply ``resource`` for order ``order-1``."""
    return resource.body.build(_document(resource)).wire()


def undo_body(resource: Resource, key: str) -> dict[str, Any]:
    """The body the agents' client sends to undo the effect of ``resource`` applied under ``key``: its
    ``undo_body`` if declared, else the order's id and the values the apply returned."""
    if resource.undo_body is not None:
        apply_document = _document(resource)
        own = resource.simulated(key)
        document = Document(ORDER_ID, apply_document.input, {**apply_document.results, **own})
        return resource.undo_body.build(document).wire()
    return {"orderId": ORDER_ID, **resource.simulated(key)}


@dataclass(frozen=True)
class Service:
    """How to call one resource of one simulated service. ``verb`` and ``compensated`` are None for a
    resource that cannot be undone; ``returns`` are the result names its apply answers with."""

    name: str
    collection: str
    verb: str | None
    applied: str
    compensated: str | None
    rejection: str
    body: dict[str, Any]
    returns: tuple[str, ...] = ()

    @classmethod
    def of(cls, service: ServiceDefinition, resource: Resource) -> Service:
        """The resource as declared, with the body the agents' client would send for order ``order-1``."""
        return cls(
            name=service.name,
            collection=apply_path(service, resource),
            verb=resource.undo,
            applied=resource.applied,
            compensated=resource.undone,
            rejection=resource.rejection,
            body=apply_body(resource),
            returns=tuple(resource.result_names),
        )

    @property
    def resource(self) -> Resource:
        """The declared resource."""
        service = next(s for s in DECLARED if s.name == self.name)
        return next(r for r in service.resources if apply_path(service, r) == self.collection)

    def result(self, key: str) -> dict[str, Any]:
        """The result values its apply under ``key`` answers."""
        return self.resource.simulated(key)

    def answer(self, key: str, order_id: str = ORDER_ID) -> dict[str, Any]:
        """The whole answer to its apply under ``key``."""
        return {**self.result(key), "id": key, "orderId": order_id, "status": self.applied}

    def compensation_path(self, key: str, verb: str | None = None) -> str:
        """The compensation route of ``key`` (for a resource that cannot be undone: where it would be)."""
        return f"{self.collection}/{key}/{verb or self.verb}"


# Every resource of every service, for tests about what each route does.
RESOURCES = [Service.of(service, resource) for service in DECLARED for resource in service.resources]
RESOURCE_IDS = [service.collection.strip("/") for service in RESOURCES]
# Those that can be undone (they have an undo route), and those that cannot (they have none).
UNDOABLE = [service for service in RESOURCES if service.verb is not None]
UNDOABLE_IDS = [service.collection.strip("/") for service in UNDOABLE]
FINAL = [service for service in RESOURCES if service.verb is None]
FINAL_IDS = [service.collection.strip("/") for service in FINAL]
# Every undo action declared, to call where a resource without one would have its undo route.
UNDO_ACTIONS = sorted({service.verb for service in UNDOABLE if service.verb is not None})
# One resource per service (its first that can be undone, else its first), for tests about services.
SERVICES = [
    Service.of(service, next((r for r in service.resources if r.undo), service.resources[0]))
    for service in DECLARED
]
SERVICE_IDS = [service.name for service in SERVICES]
# Services by role, each with a resource that can be undone; with fewer than three such services declared,
# some roles are played by one service (``needs_services`` skips a test that needs them distinct).
ROLES = [service for service in SERVICES if service.verb is not None]
FIRST, SECOND, LAST = ROLES[0], ROLES[min(1, len(ROLES) - 1)], ROLES[-1]
# A name no service has.
UNDECLARED = "-".join(SERVICE_IDS) + "-undeclared"
# A result name some declared resource returns.
RESULT_NAMES = sorted({name for service in RESOURCES for name in service.returns})


def needs_services(count: int) -> pytest.MarkDecorator:
    """Skip a test that needs ``count`` distinct services (that can be undone) when fewer are declared."""
    return pytest.mark.skipif(len(ROLES) < count, reason=f"needs {count} declared services")


def other_undo_paths() -> list[str]:
    """Undo paths that no route serves: a resource's collection with another resource's undo action (for
    a resource that cannot be undone, any undo action)."""
    undos = {resource.undo for service in DECLARED for resource in service.resources if resource.undo}
    return [
        f"{apply_path(service, resource)}/key-1/{undo}"
        for service in DECLARED
        for resource in service.resources
        for undo in sorted(undos - {resource.undo})
    ]


def entry(
    service: Service,
    key: str,
    *,
    order_id: str = ORDER_ID,
    compensated: int = 0,
    carried: dict[str, Any] | None = None,
    undo_carried: dict[str, Any] | None = None,
    trace_ids: list[str] | None = None,
) -> dict[str, Any]:
    """The ledger entry of an apply of ``service`` under ``key`` (and of its undo when ``compensated``),
    less the change numbers (see :func:`without_seq`); its calls came in the traces ``trace_ids`` (by
    default none: without a ``traceparent`` header)."""
    return {
        "orderId": order_id,
        "applied": 1,
        "compensated": compensated,
        "result": service.result(key),
        # The body as received: by default what :func:`apply` sends for ``order_id``.
        "carried": carried if carried is not None else {**service.body, "orderId": order_id},
        "undoCarried": (undo_carried or {}) if compensated else None,
        "traceIds": trace_ids or [],
    }


def without_seq(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Ledger entries by key without their change numbers, which depend on everything done before."""
    return {
        key: {k: v for k, v in value.items() if k not in ("appliedSeq", "compensatedSeq")}
        for key, value in entries.items()
    }


def empty(value: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per declared service, ``value`` (a fresh copy each) or ``{}``."""
    return {name: dict(value or {}) for name in SERVICE_IDS}


FAULT_DEFAULTS = {
    "transientRate": 0.0,
    "permanentRate": 0.0,
    "hangRate": 0.0,
    "lostReplyRate": 0.0,
    "latencyMs": 0,
    "hangMs": 30000,
    "asyncRate": 0.0,
    "callbackDelayMs": 200,
    "callbackLostRate": 0.0,
    "callbackDuplicateRate": 0.0,
    "callbackLateRate": 0.0,
    "callbackLateMs": 5000,
}
# The counters of the asynchronous mode, none of which moves unless a resource answers later.
NO_CALLBACKS = {
    "accepted": 0,
    "callbacks": 0,
    "callbackLost": 0,
    "callbackDuplicated": 0,
    "callbackLate": 0,
}
NO_CALLS = {"calls": 0, "transient": 0, "permanent": 0, "hang": 0, "lostReply": 0, **NO_CALLBACKS}


def apply(client: httpx.Client, service: Service, key: str, **overrides: Any) -> httpx.Response:
    """Call the apply route of ``service`` with idempotency key ``key``."""
    return client.post(
        service.collection, json={**service.body, **overrides}, headers={"Idempotency-Key": key}
    )


def compensate(
    client: httpx.Client, service: Service, key: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    """Call the compensation route of ``key``, with ``body`` or none (as older callers did)."""
    return client.post(service.compensation_path(key), json=body)


def set_faults(client: httpx.Client, profile: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``POST /faults`` and return the full profile it answers."""
    response = client.post("/faults", json=profile)
    assert response.status_code == 200, response.text
    return response.json()


def ledger(client: httpx.Client) -> dict[str, dict[str, dict[str, Any]]]:
    """``GET /ledger``."""
    response = client.get("/ledger")
    assert response.status_code == 200, response.text
    return response.json()


def stats(client: httpx.Client) -> dict[str, dict[str, int]]:
    """``GET /stats``."""
    response = client.get("/stats")
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    """Assert a JSON error with this status and code; return its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error["message"]
