"""Traces: one order, one trace, across every hop (OpenTelemetry, W3C trace context).

An order's trace starts at its submission, whose span context the order keeps (``TaskState.trace_parent``).
Every message the engine sends carries the span context it was sent from (the ``traceparent`` application
property, see :mod:`adapters.servicebus`), and whoever handles it opens its span as a child of that: the
Scheduler's transitions, the Agents' calls (and their HTTP tries, which pass the context on to the remote
service) and the replies form one tree. The Supervisor sweeps in a trace of its own; its recovery of an
order, and an operator's action on one, are spans in the order's trace, under its submission, linked to
the sweep or request that did them, so whatever they send next stays in the order's trace.

Without a configured tracer provider every span here is a no-op (tests, the simulation).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags, Tracer

if TYPE_CHECKING:
    from .state import TaskRecord

TRACER_NAME = "engine"
# Where the context travels: a Service Bus application property, and an HTTP header.
TRACEPARENT = "traceparent"

# Span names (the workbook and orders-trace read these).
ORDER_SUBMIT = "order.submit"
SCHEDULER_COMMAND = "scheduler.command"
SCHEDULER_REPLY = "scheduler.reply"
AGENT_CALL = "agent.call"
HTTP_CALL = "http.call"
CALLBACK_RECEIVE = "callback.receive"
SUPERVISOR_SWEEP = "supervisor.sweep"
SUPERVISOR_RECOVER = "supervisor.recover"
OPERATOR_ACTION = "operator.action"
SPAN_NAMES = (
    ORDER_SUBMIT,
    SCHEDULER_COMMAND,
    SCHEDULER_REPLY,
    AGENT_CALL,
    HTTP_CALL,
    CALLBACK_RECEIVE,
    SUPERVISOR_SWEEP,
    SUPERVISOR_RECOVER,
    OPERATOR_ACTION,
)

# Span attributes.
ORDER_ID = "order.id"
WORKFLOW = "workflow.name"
WORKFLOW_VERSION = "workflow.version"
STEP = "step.name"
STEP_INDEX = "step.index"
ATTEMPT = "step.attempt"
COMPENSATING = "step.compensating"
QUEUE = "messaging.destination.name"
COMMAND_KIND = "command.kind"
SERVICE = "peer.service"
ACTION = "agent.action"
OUTCOME = "agent.outcome"
RECOVERY = "recovery.action"
OPERATION = "operator.action"

# The global provider's (a proxy until one is set); the simulation swaps in a provider of its own per run.
_tracer: Tracer = trace.get_tracer(TRACER_NAME)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def traceparent(span: Span | None = None) -> str | None:
    """The W3C ``traceparent`` of ``span`` (default: the current one), or None when there is none."""
    context = (span or trace.get_current_span()).get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def span_context(value: object) -> SpanContext | None:
    """The remote span context a ``traceparent`` names; None for anything else (absent or malformed
    context is not an error: the span starts a trace of its own)."""
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None:
        return None
    trace_id, span_id = int(found[1], 16), int(found[2], 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(found[3], 16)))


def trace_id(value: str | None) -> str | None:
    """The trace id (32 hex digits) of a ``traceparent``; None if it names none."""
    context = span_context(value)
    return None if context is None else f"{context.trace_id:032x}"


def from_properties(properties: Mapping[Any, Any] | None) -> str | None:
    """The ``traceparent`` among a message's application properties (keys and values may be bytes)."""
    if not properties:
        return None
    value = properties.get(TRACEPARENT, properties.get(TRACEPARENT.encode()))
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@contextmanager
def span(
    name: str,
    kind: SpanKind = SpanKind.INTERNAL,
    *,
    parent: str | None = None,
    links: Sequence[str | None] = (),
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span, current within the block: a child of ``parent`` (a ``traceparent``) when it names one, else
    of the current span; linked to each of ``links`` that names one. An exception leaving the block sets
    the span's status to error, with the exception's type and text."""
    context = None
    remote = span_context(parent)
    if remote is not None:
        context = trace.set_span_in_context(NonRecordingSpan(remote))
    linked = [Link(c) for c in (span_context(link) for link in links) if c is not None]
    # The exception's type and text go in the span's status; its traceback (costly to format on every
    # failed delivery) is in the log record of whoever handles it.
    with _tracer.start_as_current_span(
        name, context=context, kind=kind, links=linked, attributes=_clean(attributes), record_exception=False
    ) as current:
        yield current


def use_tracer(tracer: Tracer | None) -> Tracer:
    """Make ``tracer`` the one spans start from (None: the global provider's again); returns the one
    before. For a run with a provider of its own (the simulation), not for the app."""
    global _tracer
    previous = _tracer
    _tracer = tracer or trace.get_tracer(TRACER_NAME)
    return previous


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}


def annotate(**attributes: Any) -> None:
    """Add attributes (None values left out) to the current span, if it records."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes({k: v for k, v in attributes.items() if v is not None})


def task_attributes(
    record: TaskRecord, index: int | None = None, attempt: int | None = None
) -> dict[str, Any]:
    """The attributes that place a span in an order: the order, its workflow, and a step when given."""
    state = record.state
    fields: dict[str, Any] = {
        ORDER_ID: state.order_id,
        WORKFLOW: state.workflow,
        WORKFLOW_VERSION: state.workflow_version,
    }
    if index is not None and index < len(record.steps):
        fields[STEP] = record.steps[index].name
        fields[STEP_INDEX] = index
        if attempt is not None:
            fields[ATTEMPT] = attempt
    return fields


def annotate_task(record: TaskRecord, index: int | None = None, attempt: int | None = None) -> None:
    """Place the current span in ``record``'s order (and a step of it, when given)."""
    if trace.get_current_span().is_recording():
        annotate(**task_attributes(record, index, attempt))


def recording() -> bool:
    """Whether the current span records (work spent on attributes is wasted otherwise)."""
    return trace.get_current_span().is_recording()


def error(message: str) -> None:
    """Mark the current span failed, with ``message``."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_status(trace.Status(trace.StatusCode.ERROR, message))
