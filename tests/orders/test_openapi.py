"""The OpenAPI document: every route of function_app.py and nothing else, built from the API's models; the
body of an order documented per declared workflow, as the API validates it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, ConfigDict, Field
from schemathesis import GenerationMode

from devhost.functions import load_functions
from engine import operator_actions
from engine.clock import ManualClock
from engine.parts import EngineParts
from engine.sealing import InputKey, Keyring
from engine.settings import EngineSettings
from engine.state import StepStatus
from engine.tasks import TaskService
from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders import access, openapi, routes
from orders.api import OrdersApi
from orders.catalog import CATALOG
from orders.inputs import FulfilmentOrder
from orders.models import ErrorBody, ExtendRequest, OrderStatus, StepView
from tests.engine.fakes import MemoryStore, RecordingSender

ROOT = Path(__file__).resolve().parents[2]
# Forwarders to the remote-service simulators, registered only with ENABLE_SIMULATORS=true for a demo
# deployment: they are not part of this API (the simulators document their own routes).
DEMO_ONLY = {"simulators", "simulators_control"}


def http_routes() -> dict[tuple[str, str], str]:
    """(METHOD, /api/route) -> function name, for every HTTP function of function_app.py."""
    found: dict[tuple[str, str], str] = {}
    for spec in load_functions(ROOT):
        if spec.route is None or spec.name in DEMO_ONLY:
            continue
        for method in spec.methods or ():
            found[(method.upper(), f"/api/{spec.route}")] = spec.name
    return found


def operation(method: str, path: str) -> dict[str, Any]:
    return openapi.document()["paths"][path][method.lower()]


def test_the_document_has_every_route_of_the_app_and_no_other() -> None:
    routes = http_routes()
    documented = routes.keys()
    assert set(routes) == documented, (
        f"in the app only: {set(routes) - documented}; documented only: {documented - set(routes)}"
    )
    for (method, path), name in routes.items():
        assert operation(method, path)["operationId"] == name


def test_the_document_is_valid_openapi_3_1() -> None:
    schema = schemathesis.openapi.from_dict(openapi.document())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(routes.ROUTES)


def test_schemas_come_from_the_models_the_code_uses() -> None:
    schemas = openapi.document()["components"]["schemas"]
    assert schemas["ExtendRequest"]["properties"]["seconds"]["maximum"] == 86_400
    assert set(schemas["OrderStatus"]["properties"]) == {
        f.alias or n for n, f in OrderStatus.model_fields.items()
    }
    assert set(schemas["ErrorBody"]["properties"]) == set(ErrorBody.model_fields)
    assert schemas["ExtendRequest"]["additionalProperties"] is False
    assert ExtendRequest.model_fields["seconds"].is_required()


def test_etags_if_match_and_errors_are_documented() -> None:
    assert "ETag" in operation("GET", "/api/orders/{orderId}")["responses"]["200"]["headers"]
    for op in routes.ROUTES:
        entry = operation(op.method, f"/api{op.path}")
        for status, response in entry["responses"].items():
            if int(status) >= 400 and status != "401":  # 401 is the host's, before the function runs
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }
        if op.tag == "operator" and op.method == "post":
            names = {p["name"] for p in entry["parameters"]}
            assert "If-Match" in names
            assert {"202", "409", "412", "428"} <= set(entry["responses"])
            assert "ETag" in entry["responses"]["202"]["headers"]
        if op.allowed == access.SIGNED:  # its own proof: a 401 for a bad signature, never a 403
            assert "401" in entry["responses"] and "403" not in entry["responses"]
            assert entry["security"] == []
            continue
        public = op.allowed == access.ANYONE
        assert ("401" in entry["responses"]) == ("403" in entry["responses"]) == (not public)
        assert (entry["security"] == []) == public


# ---- the body of an order, per workflow ----------------------------------------------------------------
def body_validator(document: dict[str, Any], component: str = openapi.SUBMISSION) -> Any:
    """A JSON Schema 2020-12 validator of one component of ``document`` (its references resolved in it)."""
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
    )


def required_fields(model: type[BaseModel]) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items() if f.is_required()}


def test_each_workflow_has_its_input_schema_with_its_required_fields_and_examples() -> None:
    document = openapi.document()
    schemas = document["components"]["schemas"]
    workflows = openapi.current_workflows(CATALOG)
    assert {w.name for w in workflows} == set(CATALOG.names)
    body = operation("POST", "/api/orders")["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/OrderRequest"}
    assert schemas["OrderRequest"]["oneOf"] == [{"$ref": f"#/components/schemas/{w.name}"} for w in workflows]
    whole = body_validator(document)
    for workflow in workflows:
        assert workflow.input is not None
        schema = schemas[workflow.name]
        default = workflow.name == CATALOG.default
        fields = {f.alias or n for n, f in workflow.input.model_fields.items()}
        assert set(schema["properties"]) == fields | {"orderId", "workflow"}
        assert set(schema.get("required", [])) == required_fields(workflow.input) | (
            {"workflow"} if not default else set()
        )
        assert schema["additionalProperties"] is False  # a misspelt field is refused, as the API does
        assert schema["x-workflow-version"] == workflow.version
        examples = workflow.examples()
        assert examples and schema["examples"] == [
            {**({} if default else {"workflow": workflow.name}), **e} for e in examples
        ]
        named = [v["value"] for k, v in body["examples"].items() if k.startswith(f"{workflow.name}-")]
        assert named == schema["examples"]
        for example in schema["examples"]:
            # Valid for its own workflow's schema only, so valid once under oneOf, and valid for the API.
            assert whole.is_valid(example), list(whole.iter_errors(example))
            others = [w.name for w in workflows if body_validator(document, w.name).is_valid(example)]
            assert others == [workflow.name]
            workflow.input.model_validate({k: v for k, v in example.items() if k != "workflow"})
        # Its required fields are required: each one left out is refused.
        for field in sorted(required_fields(workflow.input)):
            partial = {k: v for k, v in schema["examples"][0].items() if k != field}
            assert not whole.is_valid(partial), field
    # The input models' own components are merged into their workflows': only their nested ones remain.
    assert not {w.input.__name__ for w in workflows if w.input} & set(schemas)


def test_the_default_workflow_may_be_left_out_and_another_must_be_named() -> None:
    document = openapi.document()
    whole = body_validator(document)
    default = CATALOG.current(CATALOG.default)
    assert default is not None
    [example, *_] = default.examples()
    assert whole.is_valid(example) and whole.is_valid({**example, "workflow": default.name})
    assert whole.is_valid({**example, "workflow": None})  # the API runs the default for null too
    for wrong in ("", "no-such-workflow", *[n for n in CATALOG.names if n != default.name]):
        assert not whole.is_valid({**example, "workflow": wrong}), wrong
    assert not whole.is_valid({**example, "unknown": 1})


class Refill(BaseModel):
    """A workflow's input of a test's own: nothing like an order."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"tank": "t-1", "litres": 40}]})
    tank: str
    litres: int = Field(gt=0)
    urgent: bool = False


def test_the_document_follows_the_declaration() -> None:
    step = StepDefinition(name="pump", agent="alpha", action="do")
    catalog = WorkflowCatalog.of(
        WorkflowDefinition(name="refill", version=1, input=Refill, steps=(step,)),
        WorkflowDefinition(name="refill", version=2, description="Top up", input=Refill, steps=(step,)),
        WorkflowDefinition(name="shop", input=FulfilmentOrder, steps=(step,)),
        WorkflowDefinition(name="anything", steps=(step,)),  # no input model: any fields
    )
    document = openapi.build(catalog)
    schemas = document["components"]["schemas"]
    assert schemas["OrderRequest"]["oneOf"] == [
        {"$ref": f"#/components/schemas/{name}"} for name in ("refill", "shop", "anything")
    ]
    refill = schemas["refill"]
    assert refill["x-workflow-version"] == 2 and "Top up" in refill["description"]  # the current version
    assert set(refill["required"]) == {"tank", "litres"}  # the default: workflow may be left out
    assert refill["examples"] == [{"tank": "t-1", "litres": 40}]
    assert set(schemas["shop"]["required"]) == {"workflow", "customerId", "items", "currency"}
    assert schemas["anything"]["required"] == ["workflow"] and schemas["anything"]["additionalProperties"]
    assert "FulfilmentOrder" not in schemas and "OrderItem" in schemas
    whole = body_validator(document)
    assert whole.is_valid({"tank": "t-1", "litres": 1}) and not whole.is_valid({"tank": "t-1", "litres": 0})
    assert whole.is_valid({"workflow": "anything", "whatever": [1]})
    assert not whole.is_valid({"workflow": "shop", "tank": "t-1", "litres": 1})
    operations = [result.ok() for result in schemathesis.openapi.from_dict(document).get_all_operations()]
    assert len(operations) == len(routes.ROUTES)


def test_a_step_view_says_left_out_and_carries_its_reason_and_result() -> None:
    schemas = openapi.document()["components"]["schemas"]
    assert StepStatus.LEFT_OUT.value in schemas["StepStatus"]["enum"]
    step = schemas["StepView"]
    assert (
        {"reason", "result"}
        <= set(step["required"])
        == {f.alias or n for n, f in StepView.model_fields.items()}
    )
    assert {"type": "null"} in step["properties"]["reason"]["anyOf"]
    assert {"type": "object", "additionalProperties": True} in step["properties"]["result"]["anyOf"]


@pytest.fixture(scope="module")
def orders_api() -> OrdersApi:
    """The real API and engine over in-memory ports, serving the declared workflows."""
    settings = EngineSettings(input_keys=Keyring(InputKey.generate("test")))  # as the app's settings give
    parts = EngineParts(CATALOG, MemoryStore(), RecordingSender(), ManualClock(), settings)
    tasks = TaskService(parts)

    async def resolve() -> TaskService:
        return tasks

    return OrdersApi(resolve)


def accepted(api: OrdersApi, body: Any) -> bool:
    """Whether the API takes ``body`` as an order (a conflict with an earlier one of the same id is taken
    too: the body was valid)."""
    reply = asyncio.run(api.submit(json.dumps(body).encode(), "application/json"))
    assert reply.status in (200, 202, 400, 409), reply
    return reply.status != 400


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_takes_exactly_the_bodies_the_document_allows(
    orders_api: OrdersApi, mode: GenerationMode
) -> None:
    document = openapi.document()
    whole = body_validator(document)
    submit = schemathesis.openapi.from_dict(document)["/api/orders"]["POST"]

    @given(case=submit.as_strategy(generation_mode=mode))
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: schemathesis.Case) -> None:
        if case.media_type != "application/json" or isinstance(case.body, bytes):
            return  # another media type is refused before the body is read (415)
        assert accepted(orders_api, case.body) == whole.is_valid(case.body), case.body

    run()


def test_the_api_refuses_what_the_document_refuses(orders_api: OrdersApi) -> None:
    document = openapi.document()
    whole = body_validator(document)
    default = CATALOG.current(CATALOG.default)
    assert default is not None and default.input is not None
    [example, *_] = default.examples()
    bodies = [
        {**example, "workflow": ""},  # not a name: not the default either
        {**example, "workflow": "no-such-workflow"},
        {**example, "extra": True},
        *({k: v for k, v in example.items() if k != field} for field in required_fields(default.input)),
    ]
    for other in openapi.current_workflows(CATALOG):
        if other.name != default.name:
            bodies += [
                {**example, "workflow": other.name},  # another workflow's name on this one's input
                other.examples()[0],  # another workflow's input without its name
            ]
    for body in bodies:
        assert not whole.is_valid(body), body
        assert not accepted(orders_api, body), body


def test_every_operator_action_is_served_by_one_function_at_the_route_it_declares() -> None:
    """engine.operator_actions is the one list of actions: each has its route, its function in the app,
    and the body its declaration asks for (a number of seconds, a required note)."""
    served = http_routes()
    by_action = {route.action.name: route for route in routes.ACTIONS if route.action is not None}
    assert sorted(by_action) == sorted(action.name for action in operator_actions.ACTIONS)
    for action in operator_actions.ACTIONS:
        route = by_action[action.name]
        assert route.path.endswith(f"/{action.name}") and ("{step}" in route.path) == action.on_step
        assert served[route.key] == route.operation_id
        body = operation(*route.key)["requestBody"]["content"]["application/json"]["schema"]
        schema = openapi.document()["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        assert ("seconds" in schema.get("required", [])) == action.takes_seconds
        assert ("note" in schema.get("required", [])) == action.note_required
