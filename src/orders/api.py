"""The HTTP API, independent of the hosting framework: requests in, status + JSON out.

Errors always have the shape ``{"error": {"code", "message", "details"?}}``, and a rejected request
writes nothing. The engine's errors become replies in one place, :func:`engine_error`; anything else
(a corrupt stored record, a storage outage) is not the caller's fault and propagates, so the host
answers 500.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine.errors import Conflict, EngineError, InvalidContinuation, InvalidState, NotFound
from engine.state import ProcessState, TaskRecord
from engine.tasks import TaskService

from .models import OrderRequest, body_hash, status_view, summary

log = logging.getLogger("orders.api")

MAX_BODY_BYTES = 64 * 1024
MAX_PAGE_SIZE = 100
_ORDER_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


@dataclass
class Reply:
    """What to send back."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, code: str, message: str, details: Any = None) -> Reply:
    """A JSON error reply."""
    payload: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        payload["details"] = details
    return Reply(status, {"error": payload})


# Status and code per engine error the API expects; the first class in an error's MRO that is listed
# decides. An engine error not listed here is a fault, not an answer, and is raised on.
_ENGINE_ERRORS: dict[type[EngineError], tuple[int, str]] = {
    NotFound: (404, "NotFound"),
    Conflict: (409, "Conflict"),
    InvalidState: (409, "InvalidState"),
    InvalidContinuation: (400, "ValidationFailed"),
}


def engine_error(exc: EngineError) -> Reply:
    """The reply to an engine error the caller caused; re-raises any other."""
    for cls in type(exc).__mro__:
        if cls in _ENGINE_ERRORS:
            status, code = _ENGINE_ERRORS[cls]
            return error(status, code, str(exc))
    raise exc


def _validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"field": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]


class OrdersApi:
    """The operations behind the HTTP routes."""

    def __init__(self, tasks: Callable[[], Awaitable[TaskService]]) -> None:
        self._tasks = tasks  # resolved lazily, so a bad request costs no connection

    async def submit(self, body: bytes, content_type: str | None, base_url: str) -> Reply:
        """``POST /api/orders``."""
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return error(415, "UnsupportedMediaType", "send the order as application/json")
        if len(body) > MAX_BODY_BYTES:
            return error(413, "PayloadTooLarge", f"the body is over {MAX_BODY_BYTES} bytes")
        try:
            raw = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return error(400, "InvalidJson", f"the body is not valid JSON: {exc}")
        if not isinstance(raw, dict):
            return error(400, "ValidationFailed", "the body must be a JSON object")
        try:
            order = OrderRequest.model_validate(raw)
        except ValidationError as exc:
            return error(400, "ValidationFailed", "the order is not valid", _validation_details(exc))
        order_id = order.order_id or str(uuid.uuid4())
        document = order.document(order_id)
        try:
            created, record = await (await self._tasks()).submit(order_id, document, body_hash(document))
        except EngineError as exc:
            return engine_error(exc)
        location = f"{base_url.rstrip('/')}/api/orders/{order_id}"
        reply = {"orderId": order_id, "processState": record.state.process_state.value, "statusUrl": location}
        return Reply(202 if created else 200, reply, {"Location": location})

    async def get(self, order_id: str) -> Reply:
        """``GET /api/orders/{orderId}``."""
        if not _ORDER_ID.match(order_id):
            return engine_error(NotFound(order_id))
        try:
            return Reply(200, status_view(await (await self._tasks()).get(order_id)))
        except EngineError as exc:
            return engine_error(exc)

    async def list_by_state(self, query: Mapping[str, str]) -> Reply:
        """``GET /api/orders?processState=X[&pageSize=N][&continuationToken=T]``."""
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
        try:
            page = await (await self._tasks()).list_by_state(ProcessState(wanted), page_size, token)
        except EngineError as exc:
            return engine_error(exc)
        return Reply(
            200, {"items": [summary(s) for s in page.states], "continuationToken": page.continuation}
        )

    async def resubmit(self, order_id: str) -> Reply:
        """``POST /api/orders/{orderId}/resubmit``: an order in Error goes back to Pending."""
        return await self._change(order_id, lambda tasks: tasks.resubmit(order_id))

    async def cancel(self, order_id: str) -> Reply:
        """``POST /api/orders/{orderId}/cancel``: compensate an order that is not terminal."""
        return await self._change(order_id, lambda tasks: tasks.cancel(order_id))

    async def _change(self, order_id: str, change: Callable[[TaskService], Awaitable[TaskRecord]]) -> Reply:
        if not _ORDER_ID.match(order_id):
            return engine_error(NotFound(order_id))
        try:
            record = await change(await self._tasks())
        except EngineError as exc:
            return engine_error(exc)
        return Reply(202, status_view(record))

    @staticmethod
    def health() -> Reply:
        """``GET /api/health``."""
        return Reply(200, {"status": "ok"})
