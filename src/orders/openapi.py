"""The HTTP API's OpenAPI 3.1 document, generated from the pydantic models the API itself uses.

:func:`document` turns the routes (orders.routes, where each is declared once: its method and path, the
function that serves it, who may call it, its parameters, request body model and answers) into the
document: every model's JSON Schema comes from pydantic, so a field added to a model is in the contract
without anyone writing it twice.

The body of ``POST /api/orders`` is the envelope (``orderId``, ``workflow``) plus the input of the
workflow it names, so it is documented per workflow (:func:`build`): the component ``OrderRequest`` is a
``oneOf`` of one schema per declared workflow's current version, named after the workflow, each the
envelope with its ``workflow`` fixed and its input model's fields and examples merged in.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, cast

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from engine import WorkflowCatalog, WorkflowDefinition

from .access import ANYONE, SIGNED, Role
from .catalog import CATALOG
from .models import (
    ErrorBody,
    OrderRequest,
)
from .routes import ROUTES

TITLE = "Orders (Scheduler Agent Supervisor)"
VERSION = "1.0.0"
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
    requests = {op.body for op in ROUTES if op.body and op.body is not OrderRequest} | inputs
    responses = {a.model for op in ROUTES for a in op.answers.values() if a.model}
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
    for op in ROUTES:
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
