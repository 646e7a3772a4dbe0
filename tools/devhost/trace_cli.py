"""``orders-trace``: one order's spans, as a tree, from the devhost's span file.

Reads ``<data-dir>/telemetry/spans.jsonl`` (written by every worker process of ``orders-devhost``), finds
the trace(s) whose spans carry ``order.id`` = the order's id, and prints each as a tree: every span under
its parent, in the order they started, with its offset from the trace's start, its duration and its key
attributes. A span whose parent is not in the file (still in flight, or lost) is shown at the top level,
marked so. Links are shown under the span that has them: to the Supervisor's sweep, say, which is a trace
of its own. ``--json`` prints the same tree as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from adapters.otlp_file import AttributeValue, SpanLink, SpanRecord, read_spans, spans_path

ORDER_ID = "order.id"
# Shown on a span's line, in this order, when the span has them.
KEY_ATTRIBUTES = (
    "command.kind",
    "step.name",
    "step.attempt",
    "peer.service",
    "agent.outcome",
    "http.response.status_code",
    "recovery.action",
    "operator.action",
)
SHORT_ID = 8  # hex digits of a trace id shown next to a link
EXIT_OK = 0
EXIT_NOT_FOUND = 1

_OFFSET_WIDTH = 12
_DURATION_WIDTH = 11
_INDENT = "  "


@dataclass
class LinkView:
    """A link between two spans, and the span at its other end when the file has it."""

    trace_id: str
    span_id: str
    span: SpanRecord | None


@dataclass
class SpanNode:
    """A span in the tree, with its children ordered by start."""

    span: SpanRecord
    parent_recorded: bool
    children: list[SpanNode] = field(default_factory=list)
    links: list[LinkView] = field(default_factory=list)  # this span's own links
    linked_from: list[LinkView] = field(default_factory=list)  # other traces' spans linking here


@dataclass
class TraceView:
    """One trace of the order: its top-level spans, and when it started and ended."""

    trace_id: str
    start_ns: int
    end_ns: int
    roots: list[SpanNode]
    span_count: int


def order_traces(spans: Sequence[SpanRecord], order_id: str) -> list[TraceView]:
    """The trees of the traces in which a span names ``order_id``, earliest first (empty if none does).

    A trace that other orders share (one client request submitting several) keeps only the spans of
    this order: those naming it, those under them, and those above them (or beside them, as a span whose
    parent was not recorded) that lead to no other order.
    """
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    trace_ids = {s.trace_id for s in spans if s.attributes.get(ORDER_ID) == order_id}
    linking_here: dict[tuple[str, str], list[SpanRecord]] = {}
    for s in spans:
        for link in s.links:
            if link.trace_id in trace_ids and link.trace_id != s.trace_id:
                linking_here.setdefault((link.trace_id, link.span_id), []).append(s)

    traces: list[TraceView] = []
    for trace_id in trace_ids:
        members = {s.span_id: s for s in spans if s.trace_id == trace_id}
        kept = _spans_of_order(members, order_id)
        kept_ids = {s.span_id for s in kept}
        nodes = {
            s.span_id: SpanNode(
                span=s,
                parent_recorded=s.parent_span_id is None or s.parent_span_id in members,
                links=[_link_view(link, by_id) for link in s.links],
                linked_from=[
                    LinkView(other.trace_id, other.span_id, other)
                    for other in linking_here.get((trace_id, s.span_id), [])
                ],
            )
            for s in kept
        }
        roots: list[SpanNode] = []
        for node in nodes.values():
            parent = node.span.parent_span_id
            if parent is not None and parent in kept_ids:
                nodes[parent].children.append(node)
            else:
                roots.append(node)
        for node in nodes.values():
            node.children.sort(key=_start_order)
        roots.sort(key=_start_order)
        traces.append(
            TraceView(
                trace_id=trace_id,
                start_ns=min(s.start_ns for s in kept),
                end_ns=max(s.end_ns for s in kept),
                roots=roots,
                span_count=len(kept),
            )
        )
    traces.sort(key=lambda t: (t.start_ns, t.trace_id))
    return traces


def _spans_of_order(members: dict[str, SpanRecord], order_id: str) -> list[SpanRecord]:
    """The spans of one trace (by span id) that belong to ``order_id``, or to no other order."""
    cache: dict[str, str | None] = {}
    owners = {span_id: _order_of(span, members, cache) for span_id, span in members.items()}
    # For each span of no order: the orders of the spans under it.
    below: dict[str, set[str]] = {}
    for span in members.values():
        owner = owners[span.span_id]
        if owner is None:
            continue
        parent, steps = span.parent_span_id, 0
        while parent is not None and parent in members and owners[parent] is None and steps < len(members):
            below.setdefault(parent, set()).add(owner)
            parent, steps = members[parent].parent_span_id, steps + 1
    return [
        span
        for span_id, span in members.items()
        if owners[span_id] == order_id
        or (owners[span_id] is None and order_id in below.get(span_id, {order_id}))
    ]


def _order_of(span: SpanRecord, members: dict[str, SpanRecord], seen: dict[str, str | None]) -> str | None:
    """The order a span belongs to: its own ``order.id``, else its nearest recorded ancestor's."""
    chain: list[str] = []
    current: SpanRecord | None = span
    found: str | None = None
    while current is not None and current.span_id not in seen:
        value = current.attributes.get(ORDER_ID)
        if isinstance(value, str):
            found = value
            break
        chain.append(current.span_id)
        parent = current.parent_span_id
        # A cycle cannot come from a tracer, but a hand-written file could hold one.
        current = members.get(parent) if parent is not None and parent not in chain else None
    else:
        if current is not None:
            found = seen[current.span_id]
    for span_id in chain:
        seen[span_id] = found
    return found


def _link_view(link: SpanLink, by_id: dict[tuple[str, str], SpanRecord]) -> LinkView:
    return LinkView(link.trace_id, link.span_id, by_id.get((link.trace_id, link.span_id)))


def _start_order(node: SpanNode) -> tuple[int, str]:
    return node.span.start_ns, node.span.span_id


# ---- text ------------------------------------------------------------------------------------------
def render_text(traces: Sequence[TraceView]) -> list[Text]:
    """The trees as lines: offset and duration columns, then the span, indented under its parent."""
    lines: list[Text] = []
    for trace in traces:
        if lines:
            lines.append(Text(""))
        lines.append(
            Text.assemble(
                ("trace ", "bold"),
                (trace.trace_id, "bold cyan"),
                f"  {trace.span_count} spans, {_ms(trace.end_ns - trace.start_ns)} ms",
            )
        )
        for root in trace.roots:
            _render_node(root, trace.start_ns, 0, lines)
    return lines


def _render_node(node: SpanNode, trace_start: int, depth: int, lines: list[Text]) -> None:
    span = node.span
    offset = f"+{_ms(span.start_ns - trace_start)} ms"
    duration = f"{_ms(span.duration_ns)} ms"
    line = Text(f"{offset:>{_OFFSET_WIDTH}}{duration:>{_DURATION_WIDTH}}  {_INDENT * depth}")
    line.append(span.name, style="bold red" if span.status_code == "error" else "bold")
    for key in KEY_ATTRIBUTES:
        if key in span.attributes:
            line.append(f"  {key}=", style="dim")
            line.append(_show(span.attributes[key]))
    if span.status_code == "error":
        line.append(f"  error: {span.status_message}" if span.status_message else "  error", style="red")
    if not node.parent_recorded:
        line.append("  (parent not recorded)", style="yellow")
    lines.append(line)
    pad = " " * (_OFFSET_WIDTH + _DURATION_WIDTH + 2) + _INDENT * (depth + 1)
    for link in node.links:
        lines.append(Text(pad + "linked to " + _describe(link), style="magenta"))
    for link in node.linked_from:
        lines.append(Text(pad + "linked from " + _describe(link), style="magenta"))
    for child in node.children:
        _render_node(child, trace_start, depth + 1, lines)


def _describe(link: LinkView) -> str:
    if link.span is None:
        return f"span {link.span_id} (trace {link.trace_id[:SHORT_ID]}, not recorded)"
    return f"{link.span.name} (trace {link.trace_id[:SHORT_ID]})"


def _ms(nanoseconds: int) -> str:
    return f"{nanoseconds / 1_000_000:.1f}"


def _show(value: AttributeValue) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# ---- JSON ------------------------------------------------------------------------------------------
def render_json(order_id: str, path: Path, traces: Sequence[TraceView]) -> dict[str, Any]:
    """The trees as a JSON document (``traces[].spans[]``, each span with its ``children``)."""
    return {
        "orderId": order_id,
        "file": str(path),
        "traces": [
            {
                "traceId": trace.trace_id,
                "startTimeUnixNano": str(trace.start_ns),  # as OTLP writes it: beyond a double's precision
                "durationMs": _ms_number(trace.end_ns - trace.start_ns),
                "spanCount": trace.span_count,
                "spans": [_node_json(root, trace.start_ns) for root in trace.roots],
            }
            for trace in traces
        ],
    }


def _node_json(node: SpanNode, trace_start: int) -> dict[str, Any]:
    span = node.span
    return {
        "name": span.name,
        "spanId": span.span_id,
        "parentSpanId": span.parent_span_id,
        "parentRecorded": node.parent_recorded,
        "kind": span.kind,
        "offsetMs": _ms_number(span.start_ns - trace_start),
        "durationMs": _ms_number(span.duration_ns),
        "attributes": {key: _jsonable(value) for key, value in span.attributes.items()},
        "status": {"code": span.status_code, "message": span.status_message},
        "service": {"name": span.service_name, "instanceId": span.service_instance_id},
        "links": [_link_json(link) for link in node.links],
        "linkedFrom": [_link_json(link) for link in node.linked_from],
        "children": [_node_json(child, trace_start) for child in node.children],
    }


def _link_json(link: LinkView) -> dict[str, Any]:
    return {"traceId": link.trace_id, "spanId": link.span_id, "name": link.span.name if link.span else None}


def _ms_number(nanoseconds: int) -> float:
    return round(nanoseconds / 1_000_000, 3)


def _jsonable(value: AttributeValue) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


# ---- command line ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    # The same default folder as orders-devhost's, taken from its own parser.
    from devhost.stack import build_parser as devhost_parser

    default_data_dir: Path = devhost_parser().get_default("data_dir")
    p = argparse.ArgumentParser(prog="orders-trace", description="One order's spans, as a tree.")
    p.add_argument("order_id", metavar="orderId", help="the order's id")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir,
        help=f"orders-devhost's data folder (default {default_data_dir})",
    )
    p.add_argument("--json", action="store_true", help="print the tree as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``orders-trace``."""
    args = build_parser().parse_args(argv)
    path = spans_path(args.data_dir)
    if not path.is_file():
        _fail(f"no span file at {path} (is --data-dir orders-devhost's data folder?)")
        return EXIT_NOT_FOUND
    traces = order_traces(read_spans(path), args.order_id)
    if not traces:
        _fail(f"no span in {path} has {ORDER_ID} {args.order_id!r}")
        return EXIT_NOT_FOUND
    if args.json:
        json.dump(render_json(args.order_id, path, traces), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    # Colours only on a terminal (rich decides); no wrapping, so that piped lines stay whole.
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    for line in render_text(traces):
        console.print(line)
    return EXIT_OK


def _fail(message: str) -> None:
    print(f"orders-trace: {message}", file=sys.stderr)
