"""The HTTP API's OpenAPI 3.1 document, generated from the pydantic models the API itself uses.

:data:`OPERATIONS` declares each route once: its method and path, the function in ``function_app.py``
that serves it (its ``operationId``), its parameters, its request body model and its answers (status,
body model, headers). :func:`document` turns that into the document: every model's JSON Schema comes
from pydantic, so a field added to a model is in the contract without anyone writing it twice, and a
test checks that the routes here and the routes in ``function_app.py`` are the same set.

The body of ``POST /api/orders`` is the envelope (``orderId``, ``workflow``) plus the input of the
workflow it names, so it is documented per workflow (:func:`build`): the component ``OrderRequest`` is a
``oneOf`` of one schema per declared workflow's current version, named after the workflow, each the
envelope with its ``workflow`` fixed and its input model's fields and examples merged in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from engine import queues
from engine.state import ProcessState
from engine.workflow import WorkflowCatalog, WorkflowDefinition

from . import access
from .access import ANYONE, SIGNED, Role, Rule
from .api import COUNT_LIMIT, MAX_BODY_BYTES, MAX_JSON_DEPTH, MAX_PAGE_SIZE
from .breakers import BreakerList
from .callbacks import CallbackBody
from .catalog import CATALOG
from .deadletters import (
    MAX_SEQUENCE_NUMBER,
    DeadLetterAuditPage,
    DeadLetterCounts,
    DeadLetterListing,
    DeadLetterOutcome,
)
from .models import (
    WAIT_KINDS,
    ActionRequest,
    AuditPage,
    ErrorBody,
    ExtendRequest,
    Health,
    OrderAccepted,
    OrderCounts,
    OrderPage,
    OrderRequest,
    OrderStatus,
    SkipRequest,
)
from .search_params import searchable_fields

TITLE = "Orders (Scheduler Agent Supervisor)"
VERSION = "1.0.0"
ID_PATTERN = "^[A-Za-z0-9-]{1,64}$"
# An order as the API names it: a storefront's order is <storefront>.<id> to all but that storefront.
ORDER_ID_PATTERN = f"^{queues.TASK_ID_PATTERN}$"


@dataclass(frozen=True)
class Answer:
    """One documented response."""

    description: str
    model: type[BaseModel] | None = None
    headers: tuple[str, ...] = ()
    free_form: bool = False  # a JSON object with no fixed model (the document itself)
    html: bool = False  # a text/html page (the console)


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter."""

    name: str
    where: str
    schema: dict[str, Any]
    required: bool = True
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One route: what it takes and what it answers."""

    method: str
    path: str  # under /api, with {placeholders} as in function_app.py
    operation_id: str
    summary: str
    tag: str
    params: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    body_required: bool = False
    answers: dict[int, Answer] = field(default_factory=dict)
    description: str = ""

    @property
    def allowed(self) -> Rule:
        """Who may call it: orders.access.ROUTES, the one place that says."""
        return access.rule(self.method, f"/api{self.path}")


def _error(text: str) -> Answer:
    return Answer(text, ErrorBody)


ORDER_ID = Param(
    "orderId",
    "path",
    {"type": "string", "pattern": ORDER_ID_PATTERN},
    description="the order's id: a storefront gives the id it submitted (its own orders only); anyone else "
    "gives <storefront>.<id> for a storefront's order",
)
STEP = Param(
    "step", "path", {"type": "string", "pattern": ID_PATTERN}, description="a step of the order's workflow"
)
IF_MATCH = Param(
    "If-Match",
    "header",
    {"type": "string", "pattern": '^"[!#-~]+"$'},
    required=True,
    description="the ETag of GET /api/orders/{orderId} (a strong entity tag): the action applies only to "
    "that version",
)
_ACTION_ERRORS = {
    400: _error(
        f"the body is not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels, or repeating a key in an "
        "object, included) or not valid for this action"
    ),
    404: _error("no such order, or no such step in its workflow"),
    409: _error("the order's state does not allow this action now (InvalidState)"),
    412: _error("the ETag is stale: the order changed since it was read; nothing was changed"),
    413: _error(f"the body is over {MAX_BODY_BYTES} bytes"),
    415: _error("a body that is not application/json"),
    428: _error("If-Match is missing (or *): send the ETag from GET"),
}
_CHANGED = Answer("accepted: the order as changed, with its new ETag", OrderStatus, ("ETag",))


def _action(
    path: str, operation_id: str, summary: str, body: type[BaseModel], required: bool, step: bool
) -> Operation:
    return Operation(
        "post",
        path,
        operation_id,
        summary,
        "operator",
        (ORDER_ID, *((STEP,) if step else ()), IF_MATCH),
        body,
        required,
        {202: _CHANGED, **_ACTION_ERRORS},
    )


QUEUE = Param(
    "queue",
    "path",
    {"type": "string", "pattern": ID_PATTERN},
    description="an engine queue (see GET /api/deadletters)",
)
SEQUENCE_NUMBER = Param(
    "sequenceNumber",
    "path",
    {"type": "string", "pattern": "^[0-9]{1,19}$"},
    description="the message's sequence number in the dead-letter queue",
)


def _dead_letter_action(verb: str, operation_id: str, summary: str) -> Operation:
    return Operation(
        "post",
        f"/deadletters/{{queue}}/{{sequenceNumber}}/{verb}",
        operation_id,
        summary,
        "deadletters",
        (QUEUE, SEQUENCE_NUMBER),
        ActionRequest,
        False,
        {
            200: Answer("done, and audited", DeadLetterOutcome),
            400: _error(
                "a sequence number that is not a whole number, or an invalid body (as for the order actions)"
            ),
            404: _error("no such queue, or no such message in its dead-letter queue"),
            409: _error("the message could not be locked within the scan's bound; nothing was changed"),
            413: _error(f"the body is over {MAX_BODY_BYTES} bytes"),
            415: _error("a body that is not application/json"),
        },
    )


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "post",
        "/orders",
        "submit_order",
        "Submit an order",
        "orders",
        body=OrderRequest,
        body_required=True,
        description="The body names the workflow that runs the order (none: the first one declared) and "
        "carries that workflow's input: one schema per workflow, with examples. A body that is not a valid "
        "input of its workflow is refused with 400, naming the fields that are wrong.",
        answers={
            200: Answer(
                "the same order was already submitted with the same body", OrderAccepted, ("Location",)
            ),
            202: Answer("accepted; poll statusUrl", OrderAccepted, ("Location",)),
            400: _error(
                f"not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels, or repeating a key in an "
                "object, included), no such workflow, or not a valid input of its workflow"
            ),
            409: _error(
                "an order with this id exists with another body (Conflict), or finished and was deleted "
                "after the retention period, and its id is refused while its tombstone lasts (Purged)"
            ),
            413: _error(f"the body is over {MAX_BODY_BYTES} bytes"),
            415: _error("the body is not application/json"),
        },
    ),
    Operation(
        "get",
        "/orders",
        "list_orders",
        "List orders in one ProcessState, or find orders by customer (any field a workflow declares "
        "searchable), storefront, workflow, the step they are at and for how long, or time of submission, "
        "with or without a state; a page at a time (Processed and Compensated: those kept, i.e. finished "
        "within the retention period). A search's page may hold fewer than pageSize before the end: go on "
        "with its continuationToken",
        "orders",
        (
            Param(
                "processState",
                "query",
                {"type": "string", "enum": [s.value for s in ProcessState]},
                False,
                description="required for a listing; with a search, only the orders in this state",
            ),
            Param(
                "waitingFor",
                "query",
                {"type": "string", "enum": list(WAIT_KINDS)},
                False,
                description="only the orders waiting for this (in Waiting, or in Error past an approval's "
                "deadline)",
            ),
            Param(
                "storefront",
                "query",
                {"type": "string", "pattern": f"^{queues.SUBMITTER_PATTERN}$"},
                False,
                description="only the orders this storefront submitted (without processState: a search)",
            ),
            *(
                Param(
                    name,
                    "query",
                    {"type": "string", "minLength": 1, "maxLength": 1024},
                    False,
                    description="a search: the orders whose input has this value (a searchable field)",
                )
                for name in searchable_fields(CATALOG)
            ),
            Param(
                "workflow",
                "query",
                {"type": "string", "enum": CATALOG.names},
                False,
                description="a search: the orders of this workflow",
            ),
            Param(
                "workflowVersion",
                "query",
                {"type": "integer", "minimum": 1},
                False,
                description="a search: the orders of this version (of the workflow, if given)",
            ),
            Param(
                "step",
                "query",
                {"type": "string", "enum": sorted({s.name for w in CATALOG.workflows for s in w.steps})},
                False,
                description="a search: the orders at this step now (Pending, Processing, Waiting, "
                "Compensating or Error)",
            ),
            Param(
                "atStepSeconds",
                "query",
                {"type": "number", "minimum": 0, "maximum": 10 * 365 * 86_400},
                False,
                description="only the orders at their step (with step: at that step) for at least this many "
                "seconds",
            ),
            Param(
                "submittedFrom",
                "query",
                {"type": "string", "format": "date-time"},
                False,
                description="a search: the orders submitted at or after this time",
            ),
            Param(
                "submittedTo",
                "query",
                {"type": "string", "format": "date-time"},
                False,
                description="a search: the orders submitted before this time",
            ),
            Param("pageSize", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE}, False),
            Param("continuationToken", "query", {"type": "string"}, False),
        ),
        answers={200: Answer("one page", OrderPage), 400: _error("a missing or invalid query parameter")},
    ),
    Operation(
        "get",
        "/order-counts",
        "order_counts",
        "How many orders each ProcessState holds",
        "orders",
        answers={
            200: Answer(
                "a count per state: exact for every state but Processed and Compensated, which count the "
                f"orders kept (finished within the retention period); atLeast is true when counting stopped "
                f"at {COUNT_LIMIT} live orders in a shard",
                OrderCounts,
            )
        },
    ),
    Operation(
        "get",
        "/orders/{orderId}",
        "get_order",
        "An order's state and steps",
        "orders",
        (ORDER_ID,),
        answers={200: Answer("the order", OrderStatus, ("ETag",)), 404: _error("no such order")},
    ),
    Operation(
        "get",
        "/orders/{orderId}/audit",
        "order_audit",
        "Who did what to an order, oldest first",
        "operator",
        (ORDER_ID,),
        answers={200: Answer("the audit trail", AuditPage), 404: _error("no such order")},
    ),
    _action(
        "/orders/{orderId}/resubmit",
        "resubmit_order",
        "Send an order in Error back",
        ActionRequest,
        False,
        False,
    ),
    _action(
        "/orders/{orderId}/cancel",
        "cancel_order",
        "Compensate an order in flight",
        ActionRequest,
        False,
        False,
    ),
    _action(
        "/orders/{orderId}/steps/{step}/retry",
        "retry_step",
        "Re-dispatch the current step now",
        ActionRequest,
        False,
        True,
    ),
    _action(
        "/orders/{orderId}/steps/{step}/extend",
        "extend_step",
        "Push a running step's CompleteBy",
        ExtendRequest,
        True,
        True,
    ),
    _action(
        "/orders/{orderId}/steps/{step}/skip",
        "skip_step",
        "Mark the current step done by hand",
        SkipRequest,
        True,
        True,
    ),
    _action(
        "/orders/{orderId}/steps/{step}/approve",
        "approve_step",
        "Approve a step that waits for an approval: the order goes on",
        ActionRequest,
        False,
        True,
    ),
    _action(
        "/orders/{orderId}/steps/{step}/reject",
        "reject_step",
        "Reject a step that waits for an approval: what the order did is undone",
        ActionRequest,
        False,
        True,
    ),
    Operation(
        "get",
        "/deadletters",
        "dead_letter_counts",
        "How many dead-lettered messages each queue holds",
        "deadletters",
        answers={200: Answer("a count per queue", DeadLetterCounts)},
    ),
    Operation(
        "get",
        "/deadletters/{queue}",
        "list_dead_letters",
        "One queue's dead-lettered messages, oldest first, a page at a time",
        "deadletters",
        (
            QUEUE,
            Param(
                "fromSequenceNumber",
                "query",
                {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE_NUMBER},
                False,
            ),
            Param("pageSize", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE}, False),
        ),
        answers={
            200: Answer("one page", DeadLetterListing),
            400: _error("an invalid query parameter"),
            404: _error("no such queue"),
        },
    ),
    Operation(
        "get",
        "/deadletters/{queue}/audit",
        "dead_letter_audit",
        "Replays and purges on a queue whose message named no known order",
        "deadletters",
        (QUEUE,),
        answers={
            200: Answer("the queue's dead-letter audit trail", DeadLetterAuditPage),
            404: _error("no such queue"),
        },
    ),
    _dead_letter_action(
        "replay", "replay_dead_letter", "Send a copy to its queue, then drop the dead letter"
    ),
    _dead_letter_action("purge", "purge_dead_letter", "Drop a dead-lettered message"),
    Operation(
        "get",
        "/console",
        "console",
        "The operator console: an HTML page over this API for a signed-in person (action buttons for "
        "an operator only)",
        "operator",
        (
            Param(
                "If-None-Match",
                "header",
                {"type": "string"},
                False,
                "the ETag of the page the browser holds",
            ),
        ),
        answers={
            200: Answer("the page", headers=("Content-Security-Policy", "Cache-Control"), html=True),
            304: Answer("the browser's copy is current"),
        },
    ),
    Operation(
        "get",
        "/breakers",
        "list_breakers",
        "Every agent's shared circuit breaker, in workflow order",
        "operator",
        answers={200: Answer("one entry per agent (closed with nulls if never opened)", BreakerList)},
    ),
    Operation(
        "get",
        "/health",
        "health",
        "Liveness",
        "service",
        answers={200: Answer("alive", Health)},
    ),
    Operation(
        "post",
        "/callbacks/{service}",
        "service_callback",
        "A service that took a call to answer later (202) sends its outcome",
        "service",
        (
            Param(
                "service",
                "path",
                {"type": "string", "pattern": ID_PATTERN},
                description="the service: one whose resources are declared asynchronous",
            ),
            Param(
                "Callback-Timestamp",
                "header",
                {"type": "string", "pattern": "^[0-9]{1,12}$"},
                description="when it was sent, in Unix seconds; more than 300 s off is refused as stale",
            ),
            Param(
                "Callback-Signature",
                "header",
                {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                description="sha256= and the hex HMAC-SHA256 of '<timestamp>.<body>' with the service's "
                "callback secret (<SERVICE>_CALLBACK_SECRET)",
            ),
        ),
        CallbackBody,
        True,
        {
            202: Answer(
                "taken: the Scheduler applies the outcome to the dispatch it answers", free_form=True
            ),
            400: _error(
                "not valid JSON (as for every body: NaN, a number too large, nested deeper than "
                f"{MAX_JSON_DEPTH} levels, or repeating a key in an object, included), not a callback, or "
                "its context is not one this app sent"
            ),
            401: _error("unsigned, a wrong signature, or a stale timestamp: nothing was changed"),
            404: _error("no such service taking callbacks, or no such order"),
            409: _error("the order does not wait for this callback (late, duplicated, another attempt)"),
            413: _error(f"the body is over {MAX_BODY_BYTES} bytes"),
            415: _error("the body is not application/json"),
        },
    ),
    Operation(
        "get",
        "/openapi.json",
        "openapi",
        "This document",
        "service",
        answers={200: Answer("the OpenAPI 3.1 document", free_form=True)},
    ),
)

_HEADERS = {
    "ETag": {
        "description": "the order's version, for If-Match on an operator action",
        "schema": {"type": "string"},
        "required": True,
    },
    "Location": {
        "description": "the order's status URL, as statusUrl: PUBLIC_BASE_URL followed by "
        "/api/orders/{orderId}, or that path alone where the app sets no PUBLIC_BASE_URL",
        "schema": {"type": "string"},
        "required": True,
    },
    "Content-Security-Policy": {
        "description": "only the page's own inline style and script (by hash) and calls to this origin",
        "schema": {"type": "string"},
        "required": True,
    },
    "Cache-Control": {"description": "how a browser may keep the page", "schema": {"type": "string"}},
}


SUBMISSION = "OrderRequest"  # the component of POST /api/orders's body: one schema per workflow
ENVELOPE = ("orderId", "workflow")  # the body's own fields; every other one is the workflow's input
_COMPONENT = "#/components/schemas/"

Refs = dict[tuple[Any, str], dict[str, Any]]


def current_workflows(catalog: WorkflowCatalog = CATALOG) -> list[WorkflowDefinition]:
    """The version of each declared workflow that new orders take, in declaration order."""
    found = (catalog.current(name) for name in catalog.names)
    return [w for w in found if w is not None]


def submission_examples(workflow: WorkflowDefinition, default: bool) -> list[dict[str, Any]]:
    """The workflow's example inputs as whole bodies: naming the workflow unless it is the default."""
    named = {} if default else {"workflow": workflow.name}
    return [{**named, **example} for example in workflow.examples()]


def _envelope(workflow: WorkflowDefinition, default: bool) -> dict[str, Any]:
    """The schemas of ``orderId`` (as the envelope model validates it) and of ``workflow``, fixed to this
    workflow's name: the default's may be absent or null, as the API then runs the default."""
    order_id = dict(OrderRequest.model_json_schema(by_alias=True)["properties"]["orderId"])
    order_id.pop("title", None)
    order_id.setdefault("description", "the order's id; none: the API makes one up and answers it")
    if default:
        name: dict[str, Any] = {
            "type": ["string", "null"],
            "enum": [workflow.name, None],
            "default": None,
            "description": f"{workflow.name}, the default: may be left out",
        }
    else:
        name = {"type": "string", "enum": [workflow.name], "description": "the workflow that runs the order"}
    return {"orderId": order_id, "workflow": name}


def _submission(
    workflow: WorkflowDefinition, default: bool, input_schema: dict[str, Any] | None
) -> dict[str, Any]:
    """The body of an order of ``workflow``: the envelope, then its input model's schema merged in (its
    fields, which of them are required, whether it takes others) with its examples as whole bodies."""
    given = dict(input_schema or {})
    about = f"{workflow.name} version {workflow.version}"
    if default:
        about += " (the default: a body may leave workflow out)"
    words = [str(w).rstrip(".") for w in (workflow.description, given.get("description")) if w]
    # The envelope's fields are the API's own: an input field of the same name would never reach the input.
    fields = {k: v for k, v in dict(given.get("properties", {})).items() if k not in ENVELOPE}
    required = [*([] if default else ["workflow"]), *(r for r in given.get("required", []) if r in fields)]
    schema: dict[str, Any] = {
        "title": workflow.name,
        "description": f"An order of {about}" + (": " + ". ".join(words) + "." if words else "."),
        "type": "object",
        "properties": {**_envelope(workflow, default), **fields},
        # Without an input model the workflow takes any fields, as the API does.
        "additionalProperties": given.get("additionalProperties", input_schema is None),
        "x-workflow-version": workflow.version,
    }
    # Whatever else the input model's schema says of the whole body holds too.
    schema.update({k: v for k, v in given.items() if k not in (*schema, "examples", "required")})
    if required:
        schema["required"] = required
    if examples := submission_examples(workflow, default):
        schema["examples"] = examples
    return schema


def _schemas(catalog: WorkflowCatalog) -> tuple[Refs, dict[str, Any]]:
    """Every model's schema, requests as validated and responses as serialised, under components; the
    submission's, one per workflow of ``catalog`` and ``OrderRequest`` their ``oneOf``."""
    workflows = current_workflows(catalog)
    inputs = {w.input for w in workflows if w.input is not None}
    requests = {op.body for op in OPERATIONS if op.body and op.body is not OrderRequest} | inputs
    responses = {a.model for op in OPERATIONS for a in op.answers.values() if a.model}
    pairs: list[tuple[type[BaseModel], Any]] = [(m, "validation") for m in sorted(requests, key=str)]
    pairs += [(m, "serialization") for m in sorted(responses, key=str)]
    found, top = models_json_schema(pairs, ref_template=_COMPONENT + "{model}", by_alias=True)
    refs = cast(Refs, dict(found))
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    named = {m: refs[(m, "validation")]["$ref"].removeprefix(_COMPONENT) for m in inputs}
    for workflow in workflows:
        model = workflow.input
        input_schema = schemas[named[model]] if model is not None else None
        schemas[workflow.name] = _submission(workflow, workflow.name == catalog.default, input_schema)
    schemas[SUBMISSION] = {
        "title": SUBMISSION,
        "description": "The body of POST /api/orders: `orderId` (optional), `workflow` (which declared "
        "workflow runs the order; none: the default) and that workflow's input, one schema per workflow.",
        "oneOf": [{"$ref": _COMPONENT + w.name} for w in workflows],
    }
    refs[(OrderRequest, "validation")] = {"$ref": _COMPONENT + SUBMISSION}
    # An input model is merged into its workflows' schemas: its own component goes unless something else
    # refers to it (a model the API also answers with).
    for name in set(named.values()):
        others = json.dumps({k: v for k, v in schemas.items() if k != name})
        if f'"{_COMPONENT}{name}"' not in others:
            del schemas[name]
    return refs, schemas


def _request_examples(catalog: WorkflowCatalog) -> dict[str, Any]:
    """The submission's examples, named, for the request body (where tools offer them to try)."""
    found: dict[str, Any] = {}
    for workflow in current_workflows(catalog):
        bodies = submission_examples(workflow, workflow.name == catalog.default)
        for n, body in enumerate(bodies, start=1):
            found[f"{workflow.name}-{n}"] = {"summary": f"{workflow.name}, example {n}", "value": body}
    return found


@cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route, for the declared workflows (built once per process; do
    not mutate it)."""
    return build(CATALOG)


def build(catalog: WorkflowCatalog) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route, with ``catalog``'s workflows' submissions."""
    refs, schemas = _schemas(catalog)
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        entry: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "tags": [op.tag],
            **({"description": op.description} if op.description else {}),
            "responses": {},
        }
        if op.params:
            entry["parameters"] = [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.required or p.where == "path",
                    "schema": p.schema,
                    **({"description": p.description} if p.description else {}),
                }
                for p in op.params
            ]
        if op.body:
            media: dict[str, Any] = {"schema": refs[(op.body, "validation")]}
            if op.body is OrderRequest and (examples := _request_examples(catalog)):
                media["examples"] = examples
            entry["requestBody"] = {"required": op.body_required, "content": {"application/json": media}}
        for status, answer in sorted(op.answers.items()):
            response: dict[str, Any] = {"description": answer.description}
            if answer.model:
                schema = refs[(answer.model, "serialization")]
                response["content"] = {"application/json": {"schema": schema}}
            elif answer.free_form:
                response["content"] = {"application/json": {"schema": {"type": "object"}}}
            elif answer.html:
                response["content"] = {"text/html": {"schema": {"type": "string"}}}
            if answer.headers:
                response["headers"] = {name: _HEADERS[name] for name in answer.headers}
            entry["responses"][str(status)] = response
        allowed = op.allowed
        if allowed == ANYONE:
            entry["security"] = []
        elif allowed == SIGNED:
            # No role: the request proves itself (a callback's signature, checked by its handler).
            entry["security"] = []
            entry["x-roles"] = []
        else:
            roles = [r.value for r in Role if r in allowed]
            entry["x-roles"] = roles
            entry["security"] = [{"entraId": []}] + (
                [{"submissionKey": []}] if Role.SUBMITTER in allowed else []
            )
            entry["responses"]["401"] = (
                {
                    "description": "not signed in: a page with a link to sign in",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                }
                if op.path == "/console"
                else {
                    "description": "no credential: not signed in, and no valid submission key",
                    "content": {"application/json": {"schema": refs[(ErrorBody, "serialization")]}},
                }
            )
            entry["responses"]["403"] = {
                "description": f"signed in (or keyed) without the role this needs: {' or '.join(roles)}",
                "content": {"application/json": {"schema": refs[(ErrorBody, "serialization")]}},
            }
        paths.setdefault(f"/api{op.path}", {})[op.method] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": 'Errors are always {"error": {"code", "message", "details"?}}. Operator '
            "actions need If-Match with the ETag of GET /api/orders/{orderId}. Each operation names "
            "the roles that may call it (x-roles): submitter (a storefront, with the submission key), "
            "reader and operator (people signed in with Microsoft Entra ID, by app role).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "entraId": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "Microsoft Entra ID through App Service authentication: a browser's "
                    "session (sign in at /.auth/login/aad) or a bearer token for the app registration; "
                    "the app roles Orders.Operator and Orders.Reader give the roles operator and reader",
                },
                "submissionKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-functions-key",
                    "description": "the submission key (SUBMISSION_KEY): the submitter role only",
                },
            },
        },
        "security": [{"entraId": []}],
    }


def routes() -> set[tuple[str, str]]:
    """(METHOD, /api/path) of every documented route."""
    return {(op.method.upper(), f"/api{op.path}") for op in OPERATIONS}
