"""Callbacks: the outcome of a call a service took to answer later (202 Accepted), sent to the app.

A resource declared ``asynchronous`` (``orders.services.declaration.Resource``) may answer an apply or an
undo with 202. Its Agent's request carried two headers: ``Callback-Url`` (this route,
``POST /api/callbacks/<service>``) and ``Callback-Context`` (which dispatch it was: order, step, phase and
attempt, see ``engine.messages.callback_context``). The service later posts::

    {"context": "<the Callback-Context>", "outcome": "done" | "refused", "result": {...}, "reason": "..."}

with ``Callback-Timestamp`` (Unix seconds) and ``Callback-Signature: sha256=<hex>``, the HMAC-SHA256 of
``<timestamp>.<body>`` with the service's callback secret (the app setting ``<SERVICE>_CALLBACK_SECRET``).

What is refused, changing nothing: a service with no callbacks (404); no signature, a wrong one, or a
timestamp more than :data:`TOLERANCE_SECONDS` away from now (401, so a captured callback cannot be
replayed later); a body the API's one parser refuses (``orders.api.parse_body``, as every route that
takes a body: 415 for a type other than JSON, 413 past its size, 400 for a repeated key, a NaN, or a body
that is not a callback) or a context this app never sends (400); a context that is not the dispatch the
order waits for now:
a late, duplicated or out-of-order callback, one for an earlier attempt, or for a step the order has left
(409). An accepted callback becomes the Agent's reply it stands for, on the Scheduler's reply queue, with a
message id of its own dispatch (duplicates sent at once are one message to the broker), and the Scheduler
applies it fenced by step and attempt as any reply: whatever races it, its outcome is applied once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ConfigDict, Field

from engine import (
    AgentCall,
    AgentReply,
    EngineError,
    MessageSender,
    NotFound,
    PermanentError,
    Phase,
    ProcessState,
    ReplyOutcome,
    StepStatus,
    TaskService,
    awaits,
    parse_callback_context,
    queues,
    request_message_id,
    tracing,
)

from .api import Reply, parse_body
from .models import FieldError
from .services.client import declared_result
from .services.declaration import ServiceDefinition

TIMESTAMP_HEADER = "callback-timestamp"
SIGNATURE_HEADER = "callback-signature"
# How far a callback's timestamp may be from the app's clock: past it the callback is stale (a replay).
TOLERANCE_SECONDS = 300
_PREFIX = "sha256="
# Unix seconds in ASCII digits (str.isdigit takes '²', which int() does not), and no more of them than a
# time this side of the year 30000 has.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
# A context as engine.messages.callback_context writes it: a task id, the step, the phase, the attempt.
_CONTEXT = re.compile(rf"{queues.TASK_ID_PATTERN}:[0-9]{{1,4}}:[fc]:[0-9]{{1,9}}")


class CallbackBody(BaseModel):
    """What a service that answered later sends."""

    model_config = ConfigDict(extra="forbid")

    context: str = Field(min_length=1, max_length=200, description="the request's Callback-Context")
    outcome: Literal["done", "refused"]
    result: dict[str, Any] = Field(default_factory=dict, description="an apply's declared result values")
    reason: str | None = Field(default=None, max_length=1000, description="why it was refused")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``Callback-Signature`` of ``body`` sent at ``timestamp`` (Unix seconds, as sent)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return _PREFIX + digest


def signed_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The headers a service sends with a callback (what the simulators send)."""
    timestamp = str(int(time.time() if now is None else now))
    return {
        "Content-Type": "application/json",
        "Callback-Timestamp": timestamp,
        "Callback-Signature": signature(secret, timestamp, body),
    }


@dataclass(frozen=True)
class Refused:
    """Why a callback is refused: a status and a message (nothing was changed)."""

    status: int
    code: str
    message: str
    details: list[FieldError] | None = None


@dataclass(frozen=True)
class Taken:
    """A callback taken: the reply it became."""

    reply: AgentReply


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: float) -> Refused | None:
    """None if ``body`` is signed with ``secret`` at a time within :data:`TOLERANCE_SECONDS` of ``now``."""
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    sent = headers.get(SIGNATURE_HEADER, "")
    if not _TIMESTAMP.fullmatch(timestamp) or not sent.startswith(_PREFIX):
        return Refused(401, "Unauthorized", "sign the callback: Callback-Timestamp and Callback-Signature")
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return Refused(
            401, "Unauthorized", f"the callback's timestamp is more than {TOLERANCE_SECONDS} s off"
        )
    # Constant time: how long a comparison takes must not tell how much of a guess was right.
    if not hmac.compare_digest(sent.encode(), signature(secret, timestamp, body).encode()):
        return Refused(401, "Unauthorized", "the callback's signature does not match")
    return None


class Callbacks:
    """Takes services' callbacks: checks them, then hands each to the Scheduler as the reply it stands for."""

    def __init__(
        self,
        services: tuple[ServiceDefinition, ...],
        secrets: Mapping[str, str],
        tasks: Callable[[], Awaitable[TaskService]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.services = {s.name: s for s in services if s.callback_secret_setting}
        self.secrets = {name: secret for name, secret in secrets.items() if secret}
        self._tasks = tasks
        self._clock = clock

    async def receive(self, service: str, headers: Mapping[str, str], body: bytes) -> Taken | Refused:
        """Check one callback (``headers`` with lower-case names) and send the reply it stands for."""
        declared = self.services.get(service)
        secret = self.secrets.get(service)
        if declared is None or secret is None:
            return Refused(404, "NotFound", f"service {service!r} sends no callbacks here")
        refused = verify(headers, body, secret, self._clock())
        if refused is not None:
            return refused
        callback = parse_body(
            CallbackBody, body, headers.get("content-type"), required=True, what="the callback"
        )
        if isinstance(callback, Reply):
            refusal = callback.body["error"]
            details = [FieldError.model_validate(d) for d in refusal.get("details", [])] or None
            return Refused(callback.status, refusal["code"], refusal["message"], details)
        dispatch = parse_callback_context(callback.context) if _CONTEXT.fullmatch(callback.context) else None
        if dispatch is None:
            return Refused(400, "ValidationFailed", "the context is not one this app sent")
        order_id, index, compensating, attempt = dispatch
        tasks = await self._tasks()
        try:
            record = await tasks.get(order_id)
        except NotFound:
            return Refused(404, "NotFound", f"no order {order_id}")
        except EngineError as exc:
            return Refused(409, "Conflict", str(exc))
        state = record.state
        step = record.steps[index] if index < len(record.steps) else None
        awaited = (StepStatus.COMPENSATING,) if compensating else (StepStatus.RUNNING, StepStatus.WAITING)
        # The task's state too, not only the step's: a step the Supervisor gave back (Pending, to be
        # dispatched again) or put in Error still says Waiting, and the Scheduler would drop its reply.
        working = (
            (ProcessState.COMPENSATING,) if compensating else (ProcessState.PROCESSING, ProcessState.WAITING)
        )
        current = (
            step is not None
            and awaits(record, tasks.parts.context(record=record), index, compensating, attempt)
            and (state.phase is Phase.COMPENSATE) == compensating
            and step.status in awaited
            and state.process_state in working
        )
        workflow = tasks.parts.catalog.find(state.workflow, state.workflow_version)
        definition = workflow.steps[index] if workflow is not None and index < len(workflow.steps) else None
        if not current or definition is None or definition.agent != service:
            # Late, duplicated, out of order, or for another service's step: nothing to change.
            return Refused(409, "Conflict", f"order {order_id} does not wait for this callback")
        reply = self._reply(declared, definition.action or "", callback, dispatch)
        at = datetime.fromtimestamp(self._clock(), UTC)
        reply.call = AgentCall(started=at, ended=at, callback=True)
        message_id = request_message_id(order_id, index, compensating, attempt) + ":callback"
        sender: MessageSender = tasks.parts.sender
        # In the order's trace: under the service's call when it passed that call's context back, else
        # under the submission.
        sent_from = headers.get(tracing.TRACEPARENT)
        same_trace = tracing.trace_id(sent_from) == tracing.trace_id(state.trace_parent)
        with tracing.span(
            tracing.CALLBACK_RECEIVE,
            SpanKind.SERVER,
            parent=sent_from if same_trace else state.trace_parent,
            links=(tracing.traceparent(),),
            attributes={
                **tracing.task_attributes(record, index, attempt),
                tracing.SERVICE: service,
                tracing.COMPENSATING: compensating,
                tracing.OUTCOME: reply.outcome.value,
            },
        ):
            await sender.send(queues.REPLY_QUEUE, reply, message_id=message_id, correlation_id=order_id)
        return Taken(reply)

    @staticmethod
    def _reply(
        service: ServiceDefinition, action: str, callback: CallbackBody, dispatch: tuple[str, int, bool, int]
    ) -> AgentReply:
        order_id, index, compensating, attempt = dispatch
        outcome, result, error = ReplyOutcome.SUCCEEDED, {}, None
        if callback.outcome == "refused":
            outcome, error = ReplyOutcome.FAILED, f"{service.name}: {callback.reason or 'refused'}"
        elif not compensating:
            resource, _ = service.resource(action)
            try:
                result = declared_result(service, resource, callback.result)
            except PermanentError as exc:  # applied, but without what later steps need: the step fails
                outcome, error = ReplyOutcome.FAILED, str(exc)
        return AgentReply(
            order_id=order_id,
            step_index=index,
            attempt=attempt,
            compensating=compensating,
            outcome=outcome,
            result=result,
            error=error,
        )
