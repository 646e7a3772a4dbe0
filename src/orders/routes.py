"""The HTTP API's routes, declared once: for each, its method and path, the function of
``function_app.py`` that serves it (by name), who may call it (orders.access's roles), and what the OpenAPI
document says of it (its parameters, its request body model, its answers). The bindings
(``function_app.py``), the role check (:func:`rule`) and the OpenAPI document (orders.openapi) all read
:data:`ROUTES`: a route added here is served, guarded and documented, and one missing here is none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from engine import WAIT_KINDS, OperatorAction, ProcessState, operator_actions, queues

from .access import ANYONE, APPROVE, OPERATE, READ, SIGNED, STOREFRONT_READ, SUBMIT, Rule
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
    ActionRequest,
    AuditPage,
    ErrorBody,
    Health,
    OrderAccepted,
    OrderCounts,
    OrderPage,
    OrderRequest,
    OrderStatus,
    action_body,
)
from .search_params import searchable_fields

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
class Route:
    """One route of the HTTP API: its method and path, the function of ``function_app.py`` that serves it
    (``operation_id``), who may call it, and what the OpenAPI document says of it."""

    method: str
    path: str  # under /api, with {placeholders} as the binding has them
    operation_id: str
    allowed: Rule
    summary: str
    tag: str
    params: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    body_required: bool = False
    answers: dict[int, Answer] = field(default_factory=dict)
    description: str = ""
    action: OperatorAction | None = None  # the operator action it carries out (engine.operator_actions)

    @property
    def key(self) -> tuple[str, str]:
        """``(METHOD, /api/path)``, as a request names it."""
        return self.method.upper(), f"/api{self.path}"

    @property
    def binding(self) -> str:
        """The route as the Functions binding takes it (no ``/api`` prefix, no leading slash)."""
        return self.path.removeprefix("/")


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


def _action(action: OperatorAction, operation_id: str, allowed: Rule, summary: str) -> Route:
    """An operator action's route: its path, parameters and body follow from the action's declaration."""
    on_step = "/steps/{step}" if action.on_step else ""
    body, required = action_body(action)
    return Route(
        "post",
        f"/orders/{{orderId}}{on_step}/{action.name}",
        operation_id,
        allowed,
        summary,
        "operator",
        (ORDER_ID, *((STEP,) if action.on_step else ()), IF_MATCH),
        body,
        required,
        {202: _CHANGED, **_ACTION_ERRORS},
        action=action,
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


def _dead_letter_action(verb: str, operation_id: str, summary: str) -> Route:
    return Route(
        "post",
        f"/deadletters/{{queue}}/{{sequenceNumber}}/{verb}",
        operation_id,
        OPERATE,
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


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/orders",
        "submit_order",
        SUBMIT,
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
    Route(
        "get",
        "/orders",
        "list_orders",
        READ,
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
    Route(
        "get",
        "/order-counts",
        "order_counts",
        READ,
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
    Route(
        "get",
        "/orders/{orderId}",
        "get_order",
        STOREFRONT_READ,
        "An order's state and steps",
        "orders",
        (ORDER_ID,),
        answers={200: Answer("the order", OrderStatus, ("ETag",)), 404: _error("no such order")},
    ),
    Route(
        "get",
        "/orders/{orderId}/audit",
        "order_audit",
        READ,
        "Who did what to an order, oldest first",
        "operator",
        (ORDER_ID,),
        answers={200: Answer("the audit trail", AuditPage), 404: _error("no such order")},
    ),
    _action(operator_actions.RESUBMIT, "resubmit_order", OPERATE, "Send an order in Error back"),
    _action(operator_actions.CANCEL, "cancel_order", OPERATE, "Compensate an order in flight"),
    _action(operator_actions.RETRY, "retry_step", OPERATE, "Re-dispatch the current step now"),
    _action(operator_actions.EXTEND, "extend_step", OPERATE, "Push a running step's CompleteBy"),
    _action(operator_actions.SKIP, "skip_step", OPERATE, "Mark the current step done by hand"),
    # The submitter changes its own orders, as it cancels nothing: a storefront corrects an address.
    _action(
        operator_actions.UPDATE,
        "update_order",
        SUBMIT,
        "Change input fields of an order in flight, as its workflow's updates allow",
    ),
    _action(
        operator_actions.APPROVE,
        "approve_step",
        APPROVE,
        "Approve a step that waits for an approval: the order goes on",
    ),
    _action(
        operator_actions.REJECT,
        "reject_step",
        APPROVE,
        "Reject a step that waits for an approval: what the order did is undone",
    ),
    Route(
        "get",
        "/deadletters",
        "dead_letter_counts",
        READ,
        "How many dead-lettered messages each queue holds",
        "deadletters",
        answers={200: Answer("a count per queue", DeadLetterCounts)},
    ),
    Route(
        "get",
        "/deadletters/{queue}",
        "list_dead_letters",
        READ,
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
    Route(
        "get",
        "/deadletters/{queue}/audit",
        "dead_letter_audit",
        READ,
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
    Route(
        "get",
        "/console",
        "console",
        READ,
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
    Route(
        "get",
        "/breakers",
        "list_breakers",
        READ,
        "Every agent's shared circuit breaker, in workflow order",
        "operator",
        answers={200: Answer("one entry per agent (closed with nulls if never opened)", BreakerList)},
    ),
    Route(
        "get",
        "/health",
        "health",
        ANYONE,
        "Liveness",
        "service",
        answers={200: Answer("alive", Health)},
    ),
    Route(
        "post",
        "/callbacks/{service}",
        "service_callback",
        SIGNED,
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
    Route(
        "get",
        "/openapi.json",
        "openapi",
        READ,
        "This document",
        "service",
        answers={200: Answer("the OpenAPI 3.1 document", free_form=True)},
    ),
)


def rule(method: str, path: str) -> Rule:
    """Who may call ``METHOD path`` (``/api/...``); KeyError for a route not declared (never served)."""
    return _RULES[(method.upper(), path)]


def named(operation_id: str) -> Route:
    """The route the function ``operation_id`` of ``function_app.py`` serves; KeyError for none."""
    return _NAMED[operation_id]


def keys() -> set[tuple[str, str]]:
    """``(METHOD, /api/path)`` of every route."""
    return set(_RULES)


# The routes of the operator actions (engine.operator_actions), each served by a function of its own.
ACTIONS = tuple(route for route in ROUTES if route.action is not None)
_RULES = {route.key: route.allowed for route in ROUTES}
_NAMED = {route.operation_id: route for route in ROUTES}
if len(_RULES) != len(ROUTES) or len(_NAMED) != len(ROUTES):
    raise ValueError("two routes share a method and path, or a function")
