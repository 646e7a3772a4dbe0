"""Traces: the spans of an order's handling (the invariants' list: :mod:`simulation.oracle`), checked once
the run has settled, from the run's own tracer provider (:class:`simulation.traces.RunSpans`)."""

from __future__ import annotations

from collections.abc import Mapping

from engine import tracing
from engine.state import TaskState

from ..tables import Row
from ..traces import RunSpans
from .core import OracleCore


def settled_traces(
    oracle: OracleCore, spans: RunSpans, ends: Mapping[str, tuple[str, TaskState | None, Row | None]]
) -> None:
    """One order, one trace: every span of an order's handling (the Scheduler's, the Agents' and their
    calls', the Supervisor's recoveries, operators' actions, callbacks) is in the trace its submission
    started and the order keeps; and every span's parent is a span of the run (no hop lost its context).
    A submission's own span is left out: a second submission of the same order starts a trace of its own."""
    started = spans.started
    expected = {
        order_id: tracing.trace_id(state.trace_parent)
        for order_id, (_, state, _) in ends.items()
        if state is not None
    }
    for span in spans.spans:
        attributes = span.attributes or {}
        order_id = str(attributes.get(tracing.ORDER_ID, ""))
        if span.parent is not None and span.parent.span_id not in started:
            oracle.violation(order_id or "-", f"a {span.name} span's parent span was never started")
        if not order_id or span.name == tracing.ORDER_SUBMIT or order_id not in expected:
            continue
        want = expected[order_id]
        got = f"{span.context.trace_id:032x}"
        if want is None:
            oracle.violation(
                order_id, f"the order keeps no trace context, and its {span.name} span is in {got}"
            )
        elif got != want:
            step = attributes.get(tracing.STEP, "")
            oracle.violation(
                order_id, f"a {span.name} span ({step}) is in trace {got}, not the order's {want}"
            )
        else:
            oracle.count("spans in their order's trace")
