"""The demo's trace check: one order, one trace, from the spans the workers wrote.

For every order the API shows (with its ``traceId``): every span that names the order is in that trace (a
second submission of the same order starts a trace of its own, and is left out); every span of the trace
but its root is a child of a span in it, so no hop lost its context; and every dispatch the order records
as answered has its Agent's span, with the step and attempt it was for.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.otlp_file import SpanRecord, read_spans, spans_path
from engine import tracing

_ANSWERED = ("succeeded", "failed")


@dataclass
class TraceReport:
    """What the check found."""

    orders: int = 0
    spans: int = 0
    calls: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line of figures."""
        return f"{self.orders} orders, {self.spans} spans in their traces, {self.calls} answered calls traced"


def _answered(order: Mapping[str, Any]) -> list[tuple[str, int, bool]]:
    return [
        (step["name"], call["attempt"], call["kind"] == "undo")
        for step in order.get("steps") or ()
        for call in step.get("calls") or ()
        if call.get("kind") != "wait" and call.get("outcome") in _ANSWERED
    ]


def check_traces(spans: Sequence[SpanRecord], orders: Iterable[Mapping[str, Any]]) -> TraceReport:
    """Check each order's trace in ``spans`` (see the module's docstring)."""
    report = TraceReport()
    by_trace: dict[str, list[SpanRecord]] = {}
    by_order: dict[str, list[SpanRecord]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
        order_id = span.attributes.get(tracing.ORDER_ID)
        if isinstance(order_id, str):
            by_order.setdefault(order_id, []).append(span)
    for order in orders:
        order_id, trace_id = order["orderId"], order.get("traceId")
        report.orders += 1
        if not trace_id:
            report.problems.append(f"{order_id}: the order keeps no trace")
            continue
        own = by_trace.get(trace_id, [])
        report.spans += len(own)
        ids = {s.span_id for s in own}
        for span in by_order.get(order_id, ()):
            if span.trace_id != trace_id and span.name != tracing.ORDER_SUBMIT:
                report.problems.append(f"{order_id}: a {span.name} span is in trace {span.trace_id}")
        roots = [s for s in own if s.parent_span_id not in ids]
        if len(roots) != 1:
            names = sorted(s.name for s in roots)
            report.problems.append(f"{order_id}: {len(roots)} spans without a parent in its trace: {names}")
        agents = {
            (
                s.attributes.get(tracing.STEP),
                s.attributes.get(tracing.ATTEMPT),
                s.attributes.get(tracing.COMPENSATING),
            )
            for s in own
            if s.name == tracing.AGENT_CALL
        }
        for step, attempt, undo in _answered(order):
            if (step, attempt, undo) in agents:
                report.calls += 1
            else:
                what = "undo" if undo else "call"
                report.problems.append(f"{order_id}: no Agent's span of {step}'s {what} (attempt {attempt})")
    return report


def wait_and_check(data_dir: Path, orders: Sequence[Mapping[str, Any]], timeout: float = 15.0) -> TraceReport:
    """Check once the workers have written the spans (they go out in batches, a second or so late): read
    again until nothing is missing or ``timeout`` passes, and report the last reading."""
    path = spans_path(data_dir)
    deadline = time.monotonic() + timeout
    while True:
        report = check_traces(read_spans(path) if path.exists() else [], orders)
        if not report.problems or time.monotonic() > deadline:
            return report
        time.sleep(0.5)  # a reader polls a file that others append to on their own schedule
