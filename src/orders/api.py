"""The HTTP API, independent of the hosting framework: requests in, status + JSON out.

Errors always have the shape ``{"error": {"code", "message", "details"?}}``, and a rejected request
writes nothing. The engine's errors become replies in one place, :func:`engine_error`; anything else
(a corrupt stored record, a storage outage) is not the caller's fault and propagates, so the host
answers 500. No error body names an exception: a message is written for the caller, never an
exception's text.

Every route that reads a JSON body reads it with :func:`parse_json`, through :func:`parse_body`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from engine import (
    WAIT_KINDS,
    Caller,
    Conflict,
    EngineError,
    InvalidContinuation,
    InvalidState,
    InvalidUpdate,
    NotFound,
    NotServedYet,
    NotUnderstood,
    OperatorAction,
    Page,
    PreconditionFailed,
    ProcessState,
    Purged,
    SearchQuery,
    TaskRecord,
    TaskService,
    UnknownStep,
    UnknownWorkflow,
    queues,
)

from . import release, search_params
from .access import NO_STOREFRONT, STOREFRONT_NAME, Scope
from .models import (
    ActionRequest,
    AuditPage,
    ErrorBody,
    ErrorInfo,
    ExtendRequest,
    FieldError,
    Health,
    OrderAccepted,
    OrderCounts,
    OrderPage,
    OrderRequest,
    StateCount,
    UpdateRequest,
    WaitCount,
    action_body,
    audit_view,
    body_hash,
    order_document,
    order_input,
    status_view,
    summary,
)

log = logging.getLogger("orders.api")

MAX_BODY_BYTES = 64 * 1024
# How deep a body's arrays and objects may nest. An order nests three levels (the order, its items, an
# item) and a declared workflow's input a few more, never this many. Checked before parsing: json.loads
# recurses once per level, so about 10,000 levels exhaust the stack (a RecursionError, a 500), and a few
# thousand that do parse would recurse as deep again in validation and when stored.
MAX_JSON_DEPTH = 32
MAX_PAGE_SIZE = 100
# Counting reads the live orders' listing entries (in flight, in Error), shard by shard; past this many in
# one shard it stops and says the counts are lower bounds. Finished orders are counted by tallies.
COUNT_LIMIT = 10_000


@dataclass
class Reply:
    """What to send back."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """What an operator action needs from the HTTP request: its body, its headers and query parameters
    (header names in lower case) for the ETag guard, who is asking as the audit trail names them and
    which orders they see (:mod:`orders.access` authenticated them before the action runs)."""

    body: bytes = b""
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    actor: str = "local"
    scope: Scope = NO_STOREFRONT


def _page_size(query: Mapping[str, str]) -> int | None:
    try:
        page_size = int(query.get("pageSize", "50"))
    except ValueError:
        return None
    return page_size if 1 <= page_size <= MAX_PAGE_SIZE else None


def error(status: int, code: str, message: str, details: list[FieldError] | None = None) -> Reply:
    """A JSON error reply (the :class:`~orders.models.ErrorBody` shape)."""
    body = ErrorBody(error=ErrorInfo(code=code, message=message, details=details))
    return Reply(status, body.model_dump(mode="json", exclude_none=True))


def etag(record: TaskRecord) -> str:
    """The ``ETag`` header of a task: its version, as a strong entity tag."""
    return f'"{record.version}"'


def _if_match(headers: Mapping[str, str]) -> list[str] | None:
    """The strong entity tags in ``If-Match``, ``*`` as itself (None when the header is missing or empty).

    A weak tag never matches under If-Match's strong comparison (RFC 9110 13.1.1), so it is left out:
    a header of weak tags only is an empty list, a precondition that cannot hold (412), not a missing
    one (428).
    """
    raw = headers.get("if-match", "").strip()
    if not raw:
        return None
    tags = [t.strip() for t in raw.split(",") if t.strip()]
    return [t.strip('"') for t in tags if not t.startswith("W/")]


# Status and code per engine error the API expects; the first class in an error's MRO that is listed
# decides. An engine error not listed here is a fault, not an answer, and is raised on.
_ENGINE_ERRORS: dict[type[EngineError], tuple[int, str]] = {
    NotFound: (404, "NotFound"),
    Purged: (409, "Purged"),
    Conflict: (409, "Conflict"),
    InvalidState: (409, "InvalidState"),
    InvalidUpdate: (400, "ValidationFailed"),
    InvalidContinuation: (400, "ValidationFailed"),
    UnknownStep: (404, "NotFound"),
    UnknownWorkflow: (400, "ValidationFailed"),
    # A deployment under way adds the workflow; an instance without it would put the order in Error.
    NotServedYet: (409, "NotServedYet"),
    PreconditionFailed: (412, "PreconditionFailed"),
    # Stored by a later release (or unreadable): answered, not failed on (that release reads it).
    NotUnderstood: (409, "NotUnderstood"),
}


def _view(tasks: TaskService, record: TaskRecord, storefront: str | None) -> dict[str, Any]:
    """The order as GET answers it, on the definition the engine runs it by (its version's)."""
    workflow = tasks.parts.catalog.find(record.state.workflow, record.state.workflow_version)
    return status_view(record, storefront, workflow).wire()


def engine_error(exc: EngineError) -> Reply:
    """The reply to an engine error the caller caused; re-raises any other."""
    for cls in type(exc).__mro__:
        if cls in _ENGINE_ERRORS:
            status, code = _ENGINE_ERRORS[cls]
            return error(status, code, str(exc))
    raise exc


def _validation_details(exc: ValidationError) -> list[FieldError]:
    return [
        FieldError(field=".".join(str(p) for p in e["loc"]) or "(body)", message=e["msg"])
        for e in exc.errors(include_url=False, include_input=False)
    ]


class InvalidJson(ValueError):
    """A body :func:`parse_json` refuses; the message says why, in words for the caller."""


# A JSON string (escapes included) and an opening or closing bracket, for measuring nesting without
# parsing: brackets inside strings do not nest. An unterminated string runs to the end of the text (its
# closing quote is optional), as the parser reads it, and so that no text is scanned twice: matching
# from every quote of an unterminated run of escaped quotes would take quadratic time.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _nests_deeper_than(text: str, limit: int) -> bool:
    """True if the arrays and objects of ``text`` nest more than ``limit`` levels deep.

    Strings are taken out first, as the parser reads them, so a bracket in a string does not count. On
    text that is not JSON the count may be off, but never below what the parser would reach before it
    stops at the first error.
    """
    bare = _JSON_STRING.sub("", text)
    if bare.count("[") + bare.count("{") <= limit:
        return False  # the common case, an ordinary order: nothing to walk
    depth = 0
    for bracket in _BRACKET.finditer(bare):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(depth - 1, 0)
    return False


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' ``object_pairs_hook``: the object, or InvalidJson naming a key it repeats.

    Without it the last value of a repeated key wins, so what a client's checks saw (the first
    ``orderId``) need not be what is stored.
    """
    built = dict(pairs)
    if len(built) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                shown = json.dumps(key[:100] + ("..." if len(key) > 100 else ""))
                raise InvalidJson(f"the key {shown} appears more than once in one object")
            seen.add(key)
    return built


def _no_constant(name: str) -> Any:
    """json.loads' ``parse_constant``: ``NaN`` and ``Infinity`` are not JSON (Python's parser takes them)."""
    raise InvalidJson(f"the body is not valid JSON: {name} is not a number JSON has")


def _finite(text: str) -> float:
    """json.loads' ``parse_float``: a number too large for a float (``1e400``) is refused, not infinity."""
    value = float(text)
    if math.isinf(value):
        raise InvalidJson(f"the body holds a number too large to read: {text[:40]}")
    return value


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``, for every route that reads JSON.

    Raises :class:`InvalidJson` when it is not JSON (``NaN`` and ``Infinity`` are not, whatever Python's
    parser takes), when a number is too large to read, when its arrays and objects nest deeper than
    :data:`MAX_JSON_DEPTH`, or when an object, at any depth, repeats a key. The text is decoded as
    json.loads decodes bytes (UTF-8, or UTF-16 or UTF-32 by their byte order).
    """
    try:
        text = body.decode(json.detect_encoding(body), "surrogatepass")
    except UnicodeDecodeError:
        raise InvalidJson("the body is not valid JSON: it is not UTF-8 text") from None
    too_deep = f"the body's arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
    if _nests_deeper_than(text, MAX_JSON_DEPTH):
        raise InvalidJson(too_deep)
    try:
        return json.loads(
            text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite
        )
    except InvalidJson:
        raise
    except json.JSONDecodeError as exc:
        # Its own words and position, not its text: a message here never names an exception.
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidJson(f"the body is not valid JSON: {exc.msg} ({where})") from None
    except RecursionError:  # not expected past the depth check; a 400 all the same, never a 500
        raise InvalidJson(too_deep) from None
    except ValueError:  # e.g. a number with more digits than Python converts
        raise InvalidJson("the body is not valid JSON") from None


def _json_object(body: bytes, content_type: str | None, required: bool) -> dict[str, Any] | Reply:
    """The body as a JSON object, or the error reply. An optional body may be empty."""
    if not body.strip() and not required:
        return {}
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return error(415, "UnsupportedMediaType", "send the body as application/json")
    if len(body) > MAX_BODY_BYTES:
        return error(413, "PayloadTooLarge", f"the body is over {MAX_BODY_BYTES} bytes")
    try:
        raw = parse_json(body)
    except InvalidJson as exc:
        return error(400, "InvalidJson", str(exc))
    if not isinstance(raw, dict):
        return error(400, "ValidationFailed", "the body must be a JSON object")
    return raw


def parse_body[M: BaseModel](
    model: type[M], body: bytes, content_type: str | None, *, required: bool, what: str = "the request"
) -> M | Reply:
    """The body as ``model``, or the error reply (415, 413, 400 with the fields that are wrong)."""
    raw = _json_object(body, content_type, required)
    if isinstance(raw, Reply):
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        return error(400, "ValidationFailed", f"{what} is not valid", _validation_details(exc))


class OrdersApi:
    """The operations behind the HTTP routes."""

    def __init__(self, tasks: Callable[[], Awaitable[TaskService]], public_base_url: str = "") -> None:
        """``public_base_url`` (PUBLIC_BASE_URL) starts a submission's status URL; empty: it is relative."""
        self._tasks = tasks  # resolved lazily, so a bad request costs no connection
        self._base_url = public_base_url.rstrip("/")

    def status_url(self, order_id: str) -> str:
        """Where an order's status is read: from the configured base URL, never from the request's Host,
        which the client chooses (``Host: evil.example`` would come back as a link to evil.example)."""
        return f"{self._base_url}/api/orders/{order_id}"

    async def submit(self, body: bytes, content_type: str | None, storefront: str | None = None) -> Reply:
        """``POST /api/orders``; by a storefront, the order is its own: its id is scoped to it
        (:func:`engine.queues.scoped_id`), so another storefront's order of the same id is another order,
        and its status messages go to its own queue."""
        order = parse_body(OrderRequest, body, content_type, required=True, what="the order")
        if isinstance(order, Reply):
            return order
        order_id = order.order_id or str(uuid.uuid4())
        scoped = queues.scoped_id(order_id, storefront)
        try:
            tasks = await self._tasks()
            catalog = tasks.parts.catalog
            workflow = order.workflow if order.workflow is not None else catalog.default
            if catalog.current(workflow) is None:
                detail = FieldError(field="workflow", message=f"declared: {', '.join(catalog.names)}")
                return error(400, "ValidationFailed", f"no workflow {workflow!r} is declared", [detail])
            # Validated as the version it will run on: the newest every instance serves.
            definition = tasks.workflow_for_new(workflow)
            try:
                document = order_document(order_id, order_input(definition, order.input_fields()))
            except ValidationError as exc:
                return error(
                    400,
                    "ValidationFailed",
                    f"the order is not a valid {workflow} input",
                    _validation_details(exc),
                )
            identity = body_hash(document, None if workflow == tasks.parts.catalog.default else workflow)
            sent = {"orderId": order_id, **order.input_fields()}
            created, record = await tasks.submit(scoped, document, identity, workflow, storefront, sent)
        except EngineError as exc:
            return engine_error(exc)
        location = self.status_url(order_id if storefront else scoped)
        reply = OrderAccepted(
            order_id=order_id, process_state=record.state.process_state, status_url=location
        )
        return Reply(202 if created else 200, reply.wire(), {"Location": location})

    async def get(self, order_id: str, scope: Scope = NO_STOREFRONT) -> Reply:
        """``GET /api/orders/{orderId}``: an order in the caller's scope (:class:`orders.access.Scope`);
        any other is answered as one that does not exist (the same 404, the same body)."""
        wanted = scope.task_id(order_id)
        if wanted is None:
            return engine_error(NotFound(order_id))
        try:
            tasks = await self._tasks()
            record = await tasks.get(wanted)
        except EngineError as exc:
            return engine_error(NotFound(order_id) if isinstance(exc, NotFound) else exc)
        if not scope.sees(record.state.submitter):  # the id's shape says it already; the record has the say
            return engine_error(NotFound(order_id))
        return Reply(200, _view(tasks, record, scope.storefront), {"ETag": etag(record)})

    async def audit(self, order_id: str, scope: Scope = NO_STOREFRONT) -> Reply:
        """``GET /api/orders/{orderId}/audit``: who did what to the order, oldest first."""
        wanted = scope.task_id(order_id)
        if wanted is None:
            return engine_error(NotFound(order_id))
        try:
            entries = await (await self._tasks()).audit(wanted)
        except EngineError as exc:
            return engine_error(NotFound(order_id) if isinstance(exc, NotFound) else exc)
        return Reply(200, AuditPage(items=[audit_view(e) for e in entries]).wire())

    @staticmethod
    def _page(page: Page, scope: Scope, backfilling: list[str]) -> Reply:
        """A page of orders as the caller's scope shows them: those it sees (a listing answers readers
        only, who see every order; a narrower scope would get its own orders and no other)."""
        items = [summary(s, scope.storefront) for s in page.states if scope.sees(s.submitter)]
        body = OrderPage(items=items, continuation_token=page.continuation, backfilling=backfilling)
        return Reply(200, body.wire())

    async def list_by_state(self, query: Mapping[str, str], scope: Scope = NO_STOREFRONT) -> Reply:
        """``GET /api/orders?processState=X[&pageSize=N][&continuationToken=T]``, or a search when the query
        names what to find (a customer, a step, a time of submission: ``orders.search_params``)."""
        try:
            tasks = await self._tasks()
            wanted_search = search_params.parse(query, tasks.parts.catalog, tasks.parts.clock.now())
        except search_params.BadQuery as exc:
            return error(400, "ValidationFailed", str(exc))
        if wanted_search is not None:
            return await self._search(tasks, wanted_search, query, scope)
        wanted = query.get("processState")
        states = [s.value for s in ProcessState]
        if wanted not in states:
            return error(400, "ValidationFailed", f"processState must be one of {', '.join(states)}")
        try:
            page_size = int(query.get("pageSize", "50"))
        except ValueError:
            page_size = 0
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            return error(
                400, "ValidationFailed", f"pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"
            )
        token = query.get("continuationToken") or None
        waiting_for = query.get("waitingFor") or None
        if waiting_for is not None and waiting_for not in WAIT_KINDS:
            return error(400, "ValidationFailed", f"waitingFor must be one of {', '.join(WAIT_KINDS)}")
        storefront = query.get("storefront") or None
        if storefront is not None and not STOREFRONT_NAME.match(storefront):
            return error(400, "ValidationFailed", "storefront must be a storefront's name")
        try:
            tasks = await self._tasks()
            page = await tasks.list_by_state(ProcessState(wanted), page_size, token, waiting_for, storefront)
        except EngineError as exc:
            return engine_error(exc)
        return self._page(page, scope, tasks.parts.backfills.incomplete("listing"))

    async def _search(
        self, tasks: TaskService, wanted: SearchQuery, query: Mapping[str, str], scope: Scope
    ) -> Reply:
        page_size = _page_size(query)
        if page_size is None:
            return error(
                400, "ValidationFailed", f"pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"
            )
        try:
            page = await tasks.search(wanted, page_size, query.get("continuationToken") or None)
        except EngineError as exc:
            return engine_error(exc)
        return self._page(page, scope, tasks.parts.backfills.incomplete("search"))

    async def counts(self) -> Reply:
        """``GET /api/order-counts``: how many orders each ProcessState holds, up to :data:`COUNT_LIMIT`."""
        try:
            tasks = await self._tasks()
            found = await tasks.count_by_state(COUNT_LIMIT)
        except EngineError as exc:
            return engine_error(exc)
        items = [StateCount(process_state=s, count=found.counts.get(s, 0)) for s in ProcessState]
        waiting = [WaitCount(waiting_for=kind, count=found.waiting.get(kind, 0)) for kind in WAIT_KINDS]
        counts = OrderCounts(
            items=items,
            waiting=waiting,
            at_least=not found.complete,
            backfilling=tasks.parts.backfills.incomplete("listing"),
        )
        return Reply(200, counts.wire())

    async def act(self, action: OperatorAction, order_id: str, step: str | None, call: Call) -> Reply:
        """``POST /api/orders/{orderId}[/steps/{step}]/{action}``: an operator action (its route and body
        follow from engine.operator_actions)."""
        model, required = action_body(action)

        def change(tasks: TaskService, task: str, by: Caller, body: ActionRequest) -> Awaitable[TaskRecord]:
            seconds = body.seconds if isinstance(body, ExtendRequest) else 0.0
            changes = dict(body.input) if isinstance(body, UpdateRequest) else None
            return tasks.act(task, action, by, step, seconds, changes=changes)

        return await self._act(order_id, call, model, change, required)

    async def _act(
        self,
        order_id: str,
        call: Call,
        model: type[ActionRequest],
        change: Callable[[TaskService, str, Caller, ActionRequest], Awaitable[TaskRecord]],
        required: bool,
    ) -> Reply:
        """An operator action on an order of the caller's scope (``change`` gets its task id): validate,
        insist on ``If-Match``, then change only the version the caller saw. Answers 202 with the order
        and its new ETag."""
        task = call.scope.task_id(order_id)
        if task is None:
            return engine_error(NotFound(order_id))
        body = parse_body(model, call.body, call.content_type, required=required)
        if isinstance(body, Reply):
            return body
        tags = _if_match(call.headers)
        if tags is None or "*" in tags:
            return error(
                428,
                "PreconditionRequired",
                "send If-Match with the ETag of GET /api/orders/{orderId}, so the action applies only "
                "to the version you read",
            )
        if not tags:
            return engine_error(PreconditionFailed(order_id))
        try:
            tasks = await self._tasks()
            version = tags[0]
            if len(tags) > 1:  # any of several: find out which one is current, if any
                version = (await tasks.get(task)).version
                if version not in tags:
                    raise PreconditionFailed(order_id)
            action = Caller(actor=call.actor, note=body.note, version=version)
            record = await change(tasks, task, action, body)
        except EngineError as exc:
            return engine_error(NotFound(order_id) if isinstance(exc, NotFound) else exc)
        return Reply(202, _view(tasks, record, call.scope.storefront), {"ETag": etag(record)})

    @staticmethod
    def health() -> Reply:
        """``GET /api/health``."""
        return Reply(200, Health(status="ok", version=release.VERSION).wire())
