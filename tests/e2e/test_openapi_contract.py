"""Schemathesis against the local stack: every operation of GET /api/openapi.json, generated inputs valid
and invalid, must answer without a 5xx, conform to the document, and write nothing when it refuses. The
body of an order is one schema per declared workflow: a body any of them allows is accepted, any other is
refused with 400, and the document's examples are accepted as orders of their workflows.

Bounded for ``make test``: a few examples per operation (``OPENAPI_MAX_EXAMPLES``, default 8; as many per
declared workflow for the submission).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
from azure.data.tables import TableServiceClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from adapters.breaker_store import BREAKER_PARTITION
from adapters.table_store import SWITCH_PARTITION, watch_table_name
from devhost import azurite
from engine import queues
from orders.catalog import CATALOG
from orders.routes import ROUTES
from tests.e2e.conftest import LocalStack, start_stack, stop_stack

MAX_EXAMPLES = int(os.environ.get("OPENAPI_MAX_EXAMPLES", "8"))
TABLE = "orders"


class Store:
    """What the stack's state store holds, minus the orders that were accepted during the run (their
    Scheduler moves them on in the background, as it should)."""

    def __init__(self, stack: LocalStack) -> None:
        port = stack.devhost.azurite_port
        self.service = TableServiceClient.from_connection_string(azurite.table_connection_string(port))
        self.accepted: set[str] = set()

    def snapshot(self) -> dict[str, str]:
        """Key -> ETag of every entity (task, steps, listing and audit entries, watch entry) of an order not
        accepted during the run: generated ids rarely hit an accepted order, so this covers what a refused
        request could have written. The watch table's entries are keyed ``watch|<PartitionKey>|<id>``,
        which no RowKey of the state table can be. The agents' circuit breakers are left out: the accepted
        orders' calls move them in the background too; so is the formats switch's partition, where every
        instance says it runs every 30 s."""
        rows: dict[str, str] = {}
        for entity in self.service.get_table_client(TABLE).list_entities(select=["PartitionKey", "RowKey"]):
            key = str(entity["RowKey"])
            if entity["PartitionKey"] in (BREAKER_PARTITION, SWITCH_PARTITION):
                continue
            if not any(key == i or f"|{i}|" in key for i in self.accepted):
                rows[key] = entity.metadata["etag"]
        watch = self.service.get_table_client(watch_table_name(TABLE))
        for entity in watch.list_entities(select=["PartitionKey", "RowKey"]):
            if entity["RowKey"] not in self.accepted:
                rows[f"watch|{entity['PartitionKey']}|{entity['RowKey']}"] = entity.metadata["etag"]
        return rows


@pytest.fixture(scope="module")
def contract_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # With the roles enforced, as in Azure; every generated request goes as the operator, who may call
    # every operation (tests/e2e/test_roles.py checks who else may).
    running = start_stack(tmp_path_factory.mktemp("contract"), workers=1, auth="roles")
    try:
        yield running
    finally:
        stop_stack(running)


@pytest.fixture(scope="module")
def store(contract_stack: LocalStack) -> Iterator[Store]:
    store = Store(contract_stack)
    yield store
    store.service.close()


@pytest.fixture(scope="module")
def api_schema(contract_stack: LocalStack) -> schemathesis.BaseSchema:
    root = contract_stack.devhost.api_url  # the document's paths start with /api
    served = contract_stack.api.get("/api/openapi.json")
    assert served.status_code == 200, served.text
    schema = schemathesis.openapi.from_dict(served.json())
    schema.config.update(base_url=root)
    # The credential is the operator's, sent with every request (check); generating bearer tokens would
    # only multiply the examples. Schemathesis still checks that removing or spoiling it is refused.
    schema.config.generation.with_security_parameters = False
    return schema


def check(case: schemathesis.Case, store: Store, operator_key: str) -> None:
    """One generated request, as the operator: no 5xx, a documented answer, and nothing written if it
    was refused."""
    before = store.snapshot()
    # Signed in as the operator with a bearer token, as the document's entraId scheme says (the devhost
    # takes the operator's key as one); schemathesis also checks that a missing or invalid one is refused.
    response = case.call(timeout=30, headers={"Authorization": f"Bearer {operator_key}"})
    # Two refusals of schema-valid input are right, and the schema cannot rule them out: a continuation
    # token the store did not issue (400), and an If-Match that is not the order's current ETag (412).
    opaque = "continuationToken" in (case.query or {}) or response.status_code == 412
    case.validate_response(response, excluded_checks=[positive_data_acceptance] if opaque else None)
    if response.status_code in (200, 202) and case.method == "POST" and case.operation.path == "/api/orders":
        store.accepted.add(response.json()["orderId"])
    if 400 <= response.status_code < 500:
        after = store.snapshot()
        assert after == before, (
            f"{case.method} {case.formatted_path} answered {response.status_code} but wrote"
        )


@pytest.fixture(scope="module")
def processed_order(contract_stack: LocalStack) -> str:
    """An order that exists and no longer changes, so generated requests reach it too."""
    order_id = contract_stack.submit()
    assert contract_stack.wait_terminal(order_id)["processState"] == "Processed"
    return order_id


def test_every_operation_conforms_and_refusals_write_nothing(
    api_schema: schemathesis.BaseSchema, store: Store, processed_order: str, contract_stack: LocalStack
) -> None:
    # The Supervisor moves the finished order to the history table in the background during the run.
    store.accepted.add(processed_order)
    operator_key = contract_stack.devhost.keys["operator"]
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) == len(ROUTES), [o.label for o in operations]
    runs: list[tuple[schemathesis.APIOperation, GenerationMode, dict[str, str] | None, int]] = []
    for operation in operations:
        # The submission's body is one schema per workflow: as many examples for each.
        examples = MAX_EXAMPLES * (len(CATALOG.names) if operation.label == "POST /api/orders" else 1)
        runs += [
            (operation, GenerationMode.POSITIVE, None, examples),
            (operation, GenerationMode.NEGATIVE, None, examples),
        ]
        if "{orderId}" in operation.path:  # random ids are unknown orders: also aim at a real one
            runs.append((operation, GenerationMode.POSITIVE, {"orderId": processed_order}, MAX_EXAMPLES))
        if "{queue}" in operation.path:  # random names are unknown queues: also aim at a real one
            runs.append((operation, GenerationMode.POSITIVE, {"queue": queues.SCHEDULER_QUEUE}, MAX_EXAMPLES))
    labels = [operation.label for operation, *_ in runs]
    assert "POST /api/orders" in labels, labels
    for operation, mode, fixed, examples in runs:

        @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
        @settings(
            max_examples=examples,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,  # the same inputs on every run: a failure reproduces
            database=None,
        )
        def run(case: schemathesis.Case) -> None:
            check(case, store, operator_key)

        try:
            run()
        except Unsatisfiable:
            # An operation that takes no input has no invalid input to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
        except Exception as exc:  # collect every operation's failure, then report them all
            inner = getattr(exc, "exceptions", None) or [exc]
            failures.append(f"{operation.label} ({mode.value}): " + "; ".join(str(e) for e in inner))
    assert not failures, "\n\n".join(failures)


def test_the_document_is_served(contract_stack: LocalStack) -> None:
    response = contract_stack.api.get("/api/openapi.json")
    assert response.status_code == 200 and response.json()["openapi"] == "3.1.0"


def test_the_documented_examples_are_orders_of_their_workflows(
    contract_stack: LocalStack, store: Store
) -> None:
    served = contract_stack.api.get("/api/openapi.json").json()
    body = served["paths"]["/api/orders"]["post"]["requestBody"]["content"]["application/json"]
    examples = {name: example["value"] for name, example in body["examples"].items()}
    # At least one per declared workflow, each naming it unless it is the default.
    assert {e.get("workflow", CATALOG.default) for e in examples.values()} == set(CATALOG.names)
    for name, example in examples.items():
        response = contract_stack.api.post("/api/orders", json=example)
        assert response.status_code == 202, f"{name}: {response.text}"
        order_id = response.json()["orderId"]
        store.accepted.add(order_id)
        assert contract_stack.order(order_id)["workflow"] == example.get("workflow", CATALOG.default)
