"""``python -m devhost.workbook_preview``: the operations workbook drawn from a local run's telemetry.

There is no Application Insights locally, so the workbook (``infra/app/workbook.json``) cannot be opened;
this draws a preview of it for the docs, honestly labelled as local. It follows the workbook's layout, item
by item: text items as headings and paragraphs, the parameters as pills (the time range is the data's),
and each query item as a panel with the item's title, drawn as its visualization says (a timechart as a
line chart, a table as a table). The figures are not found by interpreting KQL: each query item has a small
Python equivalent in :data:`PANELS`, keyed by the item's ``name``, reading the devhost's files:
``<data-dir>/telemetry/spans.jsonl`` and ``metrics.jsonl`` (:mod:`adapters.otlp_file`) and, for the
``customEvents`` panels, the engine's event records in the workers' logs (``<data-dir>/logs/worker-*.log``).
:func:`check_panels` fails, naming the panel, when a query item has no equivalent, an equivalent has no
item, the two read different metric, span or event names, or the query is no longer the one its equivalent
was written for (each equivalent holds a digest of its query); the preview runs it before drawing anything.

Where the local figure must differ from Azure's it says so under the panel. Metrics are cumulative here
(each process appends its running totals every 5 s) and deltas in Azure: a counter's increase in a bin is
the sum over processes of the increases between a process's consecutive points. Time series are binned
per 10 s or so for a short local run (5 minutes in Azure), as each chart says.

``--png`` screenshots the page with Debian's headless ``chromium`` through its ``chromedriver`` (Selenium),
the way the console's browser tests drive them.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import math
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.otlp_file import (
    AttributeValue,
    MetricPoint,
    SpanRecord,
    metrics_path,
    read_metric_points,
    read_spans,
    spans_path,
)
from engine import ProcessState, metrics, telemetry, tracing

ROOT = Path(__file__).resolve().parents[2]
WORKBOOK = ROOT / "infra" / "app" / "workbook.json"
WORKBOOK_SOURCE = "infra/app/workbook.json"

SECOND = 1_000_000_000  # ns
AZURE_BIN = "5 minutes"
# Bin widths the preview picks from: the smallest that leaves at most MAX_BINS bins, never below 10 s
# (every process writes its metrics each 5 s: a narrower bin catches one write or none).
BIN_CHOICES_S = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
MAX_BINS = 40
TAKE = 100  # the event tables' "take 100"

# Text, parameters and query items of Notebook/1.0.
TEXT_ITEM, QUERY_ITEM, PARAMETERS_ITEM = 1, 3, 9
SERIES_VISUALIZATIONS = frozenset({"timechart", "linechart"})
TABLE_VISUALIZATIONS = frozenset({"table", "barchart", "tiles"})

EVENT_LINE = re.compile(
    r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ "
    + re.escape(telemetry.log.name)
    + r": event (?P<name>\S+) ?(?P<fields>.*)$"
)
EVENT_FIELD = re.compile(r"(?:^| )([A-Za-z][\w.]*)=")
LAST_FIELD = "reason"  # every alert event's last field: free text, so it runs to the end of the line
NAME_FILTER = re.compile(r"\bname\s*==\s*'([^']*)'")


class PreviewError(Exception):
    """The workbook and the preview disagree, or the data cannot be drawn."""


# ---- the local data ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One of the engine's custom events, as a worker logged it (in Azure, a ``customEvents`` row)."""

    name: str
    time_ns: int
    fields: Mapping[str, str]


@dataclass(frozen=True)
class Telemetry:
    """Everything a run left in its data folder that the panels read."""

    data_dir: Path
    spans: list[SpanRecord]
    points: list[MetricPoint]
    events: list[Event]

    @classmethod
    def load(cls, data_dir: Path) -> Telemetry:
        """Read ``data_dir``'s span and metric files and its workers' logs (a missing file reads empty;
        no telemetry at all is an error)."""
        spans_file, metrics_file = spans_path(data_dir), metrics_path(data_dir)
        if not spans_file.exists() and not metrics_file.exists():
            raise PreviewError(f"no telemetry in {data_dir}: neither {spans_file} nor {metrics_file} exists")
        spans = read_spans(spans_file) if spans_file.exists() else []
        points = read_metric_points(metrics_file) if metrics_file.exists() else []
        return cls(data_dir, spans, points, read_events(data_dir / "logs"))

    def times(self) -> list[int]:
        """Every time the telemetry was recorded at (spans' starts and ends, metric points)."""
        found = [t for s in self.spans for t in (s.start_ns, s.end_ns) if t]
        found.extend(p.time_ns for p in self.points if p.time_ns)
        return found


def read_events(log_dir: Path) -> list[Event]:
    """The engine's custom events in the workers' logs, oldest first."""
    events: list[Event] = []
    for log_file in sorted(log_dir.glob("worker-*.log")):
        with log_file.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if " event " not in line:
                    continue
                found = EVENT_LINE.search(line.rstrip("\n"))
                if found is None:
                    continue
                # The worker's asctime: the machine's local time, to the millisecond.
                when = datetime.strptime(found["time"], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)
                time_ns = int(when.timestamp()) * SECOND + when.microsecond * 1000
                events.append(Event(found["name"], time_ns, _event_fields(found["fields"])))
    events.sort(key=lambda e: e.time_ns)
    return events


def _event_fields(text: str) -> dict[str, str]:
    """``k=v k=v ...`` as telemetry.emit_event writes it; the ``reason`` field takes the rest of the line."""
    fields: dict[str, str] = {}
    keys = list(EVENT_FIELD.finditer(text))
    for index, key in enumerate(keys):
        if key[1] in fields:
            continue
        last = key[1] == LAST_FIELD or index + 1 == len(keys)
        end = len(text) if last else keys[index + 1].start()
        fields[key[1]] = text[key.end() : end]
        if last:
            break
    return fields


@dataclass(frozen=True)
class View:
    """What the panels are drawn for: the time range, the bin width and the Order id parameter."""

    start_ns: int
    end_ns: int
    bin_ns: int
    order_id: str | None
    order_note: str = ""

    def bin(self, time_ns: int) -> int:
        """The start of the bin ``time_ns`` falls in (bins aligned as KQL's ``bin()``)."""
        return time_ns - time_ns % self.bin_ns

    @property
    def bin_label(self) -> str:
        """The bin width in words."""
        return _duration(self.bin_ns)


def pick_bin(start_ns: int, end_ns: int) -> int:
    """The narrowest bin width that leaves at most MAX_BINS bins over the range."""
    for seconds in BIN_CHOICES_S:
        if (end_ns - start_ns) / (seconds * SECOND) <= MAX_BINS:
            return seconds * SECOND
    return BIN_CHOICES_S[-1] * SECOND


def make_view(data: Telemetry, bin_seconds: float | None, order_id: str | None) -> View:
    """The page's parameters for ``data``: its whole time range, and an order to show the trace of."""
    times = data.times()
    if not times:
        raise PreviewError(f"no spans or metric points in {spans_path(data.data_dir).parent}")
    start, end = min(times), max(times)
    bin_ns = round(bin_seconds * SECOND) if bin_seconds else pick_bin(start, end)
    note = ""
    if order_id is None:
        order_id, note = _example_order(data.spans)
    return View(start, end, bin_ns, order_id, note)


def _example_order(spans: Sequence[SpanRecord]) -> tuple[str | None, str]:
    counts: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    for span in spans:
        order = span.attributes.get(tracing.ORDER_ID)
        if isinstance(order, str) and order:
            counts[order] += 1
            first[order] = min(first.get(order, span.start_ns), span.start_ns)
    if not counts:
        return None, "no span carries an order id"
    busiest = min(counts, key=lambda o: (-counts[o], first[o]))
    return busiest, "picked by the preview: the order with the most spans (choose one with --order-id)"


# ---- what a panel computes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Time:
    """A timestamp cell."""

    time_ns: int

    def __str__(self) -> str:
        return _clock(self.time_ns, millis=True)


type Cell = str | int | float | _Time | None


def _value(cell: Cell) -> float:
    """A cell as a number to sort or scale by (0 if it is not one)."""
    return float(cell) if isinstance(cell, (int, float)) else 0.0


@dataclass
class Table:
    """A panel's rows, as its query's columns."""

    columns: tuple[str, ...]
    rows: Sequence[tuple[Cell, ...]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Series:
    """A time chart: per series label, a value per bin (keyed by the bin's start, ns)."""

    value: str  # the query's value column (the y axis)
    lines: dict[str, dict[int, float]]
    notes: list[str] = field(default_factory=list)
    y_max: float | None = None  # the least top of the y axis (a gauge's highest level)
    additive: bool = False  # counts per bin, which add up (the legend shows totals)


type Figure = Table | Series


@dataclass(frozen=True)
class Panel:
    """A query item's local equivalent: the names its query filters on (``name == '...'``), what it
    yields, how it is found from the local files, and the digest of the query it was written for."""

    reads: frozenset[str]
    shape: type[Table] | type[Series]
    compute: Callable[[Telemetry, View], Figure]
    query: str


def query_digest(query: str) -> str:
    """A short digest of a KQL query, whitespace aside: an equivalent names the query it computes."""
    return hashlib.sha256(" ".join(query.split()).encode()).hexdigest()[:12]


PANELS: dict[str, Panel] = {}


def panel(
    name: str, reads: Iterable[str], shape: type[Table] | type[Series], query: str
) -> Callable[[Callable[[Telemetry, View], Figure]], Callable[[Telemetry, View], Figure]]:
    """Register a function as the local equivalent of the query item ``name``, whose query has the digest
    ``query`` (:func:`query_digest`)."""

    def register(compute: Callable[[Telemetry, View], Figure]) -> Callable[[Telemetry, View], Figure]:
        if name in PANELS:
            raise ValueError(f"panel {name!r} registered twice")
        PANELS[name] = Panel(frozenset(reads), shape, compute, query)
        return compute

    return register


# ---- helpers over metric points and spans --------------------------------------------------------------
def _text(value: AttributeValue) -> str:
    """An attribute as KQL's ``tostring(customDimensions[...])`` gives it: absent is ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _series_by_process(points: Iterable[MetricPoint], name: str) -> dict[tuple[Any, ...], list[MetricPoint]]:
    """The points of metric ``name``, per (attribute set, process), oldest first."""
    grouped: dict[tuple[Any, ...], list[MetricPoint]] = defaultdict(list)
    for point in points:
        if point.name == name:
            grouped[(frozenset(point.attributes.items()), point.service_instance_id)].append(point)
    for group in grouped.values():
        group.sort(key=lambda p: p.time_ns)
    return grouped


@dataclass(frozen=True)
class Increase:
    """What a series grew by between a process's consecutive points (a delta export in Azure)."""

    time_ns: int
    attributes: Mapping[str, AttributeValue]
    value: float = 0.0
    count: int = 0
    sum: float = 0.0
    max: float | None = None
    max_exact: bool = True


def counter_increases(points: Iterable[MetricPoint], name: str) -> list[Increase]:
    """A cumulative counter as increases (a delta point's value is its increase)."""
    increases = []
    for group in _series_by_process(points, name).values():
        before = 0.0
        for point in group:
            value = float(point.value or 0)
            if point.temporality == 1:  # delta
                increases.append(Increase(point.time_ns, point.attributes, value))
                continue
            increases.append(Increase(point.time_ns, point.attributes, value - before))
            before = value
    return increases


def histogram_increases(points: Iterable[MetricPoint], name: str) -> list[Increase]:
    """A cumulative histogram as what each export added: count, sum and the longest measurement.

    The longest is exact when it set the process's new maximum, or was the export's only measurement;
    otherwise the files hold only the upper edge of its bucket (``max_exact`` False), capped by the
    maximum so far."""
    increases = []
    for group in _series_by_process(points, name).values():
        count, total, longest = 0, 0.0, None
        buckets: tuple[int, ...] = ()
        for point in group:
            added = (point.count or 0) - count
            if added <= 0:
                continue
            added_sum = (point.sum or 0.0) - total
            exact = True
            if point.max is not None and (longest is None or point.max > longest):
                interval_max: float | None = point.max
            elif added == 1:
                interval_max = added_sum
            else:
                exact = False
                grew = [
                    i
                    for i, n in enumerate(point.bucket_counts)
                    if n - (buckets[i] if i < len(buckets) else 0) > 0
                ]
                top = max(grew) if grew else len(point.explicit_bounds)
                edge = point.explicit_bounds[top] if top < len(point.explicit_bounds) else math.inf
                interval_max = min(edge, point.max if point.max is not None else edge)
            increases.append(
                Increase(
                    point.time_ns,
                    point.attributes,
                    count=added,
                    sum=added_sum,
                    max=interval_max,
                    max_exact=exact,
                )
            )
            count, total, buckets = point.count or 0, point.sum or 0.0, point.bucket_counts
            if point.max is not None:
                longest = point.max if longest is None else max(longest, point.max)
    return increases


def gauge_points(points: Iterable[MetricPoint], name: str) -> list[MetricPoint]:
    """Every measurement of gauge ``name``, oldest first."""
    return sorted((p for p in points if p.name == name), key=lambda p: p.time_ns)


def totals(points: Iterable[MetricPoint], name: str) -> list[Increase]:
    """Each series of a counter or histogram totalled over processes (their increases added up)."""
    summed: dict[frozenset[tuple[str, AttributeValue]], Increase] = {}
    source = (
        histogram_increases(points, name)
        if any(p.name == name and p.kind == "histogram" for p in points)
        else counter_increases(points, name)
    )
    for inc in source:
        key = frozenset(inc.attributes.items())
        was = summed.get(key)
        if was is None:
            summed[key] = inc
            continue
        maxima = [m for m in (was.max, inc.max) if m is not None]
        summed[key] = Increase(
            max(was.time_ns, inc.time_ns),
            inc.attributes,
            was.value + inc.value,
            was.count + inc.count,
            was.sum + inc.sum,
            max(maxima) if maxima else None,
            was.max_exact and inc.max_exact,
        )
    return list(summed.values())


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile of ``values`` (KQL's is an estimate of the same)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _ms(span: SpanRecord) -> float:
    return span.duration_ns / 1_000_000


def _failed(span: SpanRecord) -> bool:
    """Application Insights' ``success == false``: the span's status is ERROR."""
    return span.status_code == "error"


def _agent_calls(data: Telemetry) -> list[SpanRecord]:
    # agent.call is a CONSUMER span: a `requests` row.
    return [s for s in data.spans if s.name == tracing.AGENT_CALL and s.kind in ("server", "consumer")]


def state_series(data: Telemetry, view: View, states: Sequence[str]) -> Series:
    """Orders entering each of ``states``, per bin (the counter's increases)."""
    lines: dict[str, dict[int, float]] = {s: {} for s in states}
    for inc in counter_increases(data.points, metrics.STATE_ENTERED):
        state = _text(inc.attributes.get("state"))
        if state in lines:
            bin_start = view.bin(inc.time_ns)
            lines[state][bin_start] = lines[state].get(bin_start, 0.0) + inc.value
    return _drop_empty(Series("orders", lines, additive=True), "entered")


def _drop_empty(series: Series, verb: str) -> Series:
    """Leave out the lines with no point (as Azure would: no rows, no line), and say which."""
    empty = [label for label, points in series.lines.items() if not points]
    for label in empty:
        del series.lines[label]
    if empty and series.lines:
        series.notes.append(f"No order {verb} {_join(empty)} in this run.")
    return series


def _join(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _max_per_bin(
    data: Telemetry, view: View, name: str, label: Callable[[MetricPoint], str]
) -> dict[str, dict[int, float]]:
    """KQL's ``max(value) by bin(timestamp), label`` over a gauge's points."""
    lines: dict[str, dict[int, float]] = defaultdict(dict)
    for point in gauge_points(data.points, name):
        line = lines[label(point)]
        bin_start = view.bin(point.time_ns)
        line[bin_start] = max(line.get(bin_start, -math.inf), float(point.value or 0))
    return dict(sorted(lines.items()))


def _latest[K](points: Iterable[MetricPoint], key: Callable[[MetricPoint], K]) -> dict[K, MetricPoint]:
    """KQL's ``arg_max(timestamp, value) by key``: the latest point per key."""
    latest: dict[K, MetricPoint] = {}
    for point in points:
        k = key(point)
        if k not in latest or point.time_ns >= latest[k].time_ns:
            latest[k] = point
    return latest


def _events(data: Telemetry, name: str) -> list[Event]:
    """Events called ``name``, newest first, the latest TAKE."""
    return sorted((e for e in data.events if e.name == name), key=lambda e: -e.time_ns)[:TAKE]


def _event_note(name: str) -> str:
    return (
        f"Locally, `{name}` events are read from the workers' logs (`logs/worker-*.log`), where the engine "
        "logs each custom event."
    )


def _int_or_text(value: str) -> Cell:
    try:
        return int(value)
    except ValueError:
        return value or None


# ---- the panels ----------------------------------------------------------------------------------------
FINISHING = (ProcessState.PROCESSED.value, ProcessState.COMPENSATED.value, ProcessState.ERROR.value)


@panel("throughput", [metrics.STATE_ENTERED], Series, "12d9e5601f5d")
def _throughput(data: Telemetry, view: View) -> Figure:
    return state_series(data, view, FINISHING)


def _pivot(
    data: Telemetry, metric: str, row_name: str, by: str, across: str, known: Sequence[str] = ()
) -> Table:
    """A counter's totals in a table: a row per value of attribute ``by``, a column per value of ``across``
    (those in ``known`` first, in that order, then the others sorted)."""
    cells: dict[str, dict[str, float]] = defaultdict(dict)
    for inc in totals(data.points, metric):
        column = _text(inc.attributes.get(across))
        row = cells[_text(inc.attributes.get(by))]
        row[column] = row.get(column, 0) + inc.value
    present = {c for row in cells.values() for c in row}
    columns = [c for c in known if c in present] + sorted(present - set(known))
    rows = [(name, *(_number(row.get(c, 0)) for c in columns)) for name, row in sorted(cells.items())]
    return Table((row_name, *columns), rows)


@panel("states-by-workflow", [metrics.STATE_ENTERED], Table, "73218215066f")
def _states_by_workflow(data: Telemetry, view: View) -> Figure:
    known = [s.value for s in ProcessState]
    return _pivot(data, metrics.STATE_ENTERED, "workflow", tracing.WORKFLOW, "state", known)


@panel("step-latency", [tracing.AGENT_CALL], Table, "225545becd2f")
def _step_latency(data: Telemetry, view: View) -> Figure:
    by_step: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in _agent_calls(data):
        by_step[_text(span.attributes.get(tracing.STEP))].append(span)
    rows: list[tuple[Cell, ...]] = []
    for step, spans in by_step.items():
        durations = [_ms(s) for s in spans]
        p50, p95 = round(percentile(durations, 50), 1), round(percentile(durations, 95), 1)
        rows.append((step, len(spans), sum(map(_failed, spans)), p50, p95))
    rows.sort(key=lambda r: (-_value(r[4]), str(r[0])))
    return Table(("step_name", "calls", "failed", "p50_ms", "p95_ms"), rows)


@panel("step-latency-over-time", [tracing.AGENT_CALL], Series, "9be5df831547")
def _step_latency_over_time(data: Telemetry, view: View) -> Figure:
    durations: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for span in _agent_calls(data):
        # A request's timestamp is its start.
        durations[_text(span.attributes.get(tracing.STEP))][view.bin(span.start_ns)].append(_ms(span))
    lines = {
        step: {b: percentile(values, 95) for b, values in bins.items()}
        for step, bins in sorted(durations.items())
    }
    return Series("p95_ms", lines)


@panel("step-duration", [metrics.STEP_DURATION], Table, "68c05f3628b3")
def _step_duration(data: Telemetry, view: View) -> Figure:
    grouped: dict[tuple[str, str], list[Increase]] = defaultdict(list)
    for inc in totals(data.points, metrics.STEP_DURATION):
        key = (_text(inc.attributes.get(tracing.STEP)), _text(inc.attributes.get("outcome")))
        grouped[key].append(inc)
    rows: list[tuple[Cell, ...]] = []
    for (step, outcome), incs in sorted(grouped.items()):
        attempts = sum(i.count for i in incs)
        longest = [i.max for i in incs if i.max is not None]
        avg = round(sum(i.sum for i in incs) / attempts, 3) if attempts else None
        rows.append((step, outcome, attempts, avg, max(longest) if longest else None))
    return Table(("step_name", "outcome", "attempts", "avg_s", "max_s"), rows)


@panel("remote-calls", [tracing.AGENT_CALL], Table, "c9eaeee83f39")
def _remote_calls(data: Telemetry, view: View) -> Figure:
    steps = {s.span_id: _text(s.attributes.get(tracing.STEP)) for s in _agent_calls(data)}
    tries: dict[tuple[str, str], list[SpanRecord]] = defaultdict(list)
    for span in data.spans:
        # An HTTP dependency: a CLIENT span with an HTTP method; its target is its peer.service.
        if span.kind != "client" or "http.request.method" not in span.attributes:
            continue
        if span.parent_span_id not in steps:
            continue
        service = _text(span.attributes.get(tracing.SERVICE))
        tries[(service, steps[span.parent_span_id])].append(span)
    rows: list[tuple[Cell, ...]] = []
    for (service, step), spans in tries.items():
        durations = [_ms(s) for s in spans]
        p50, p95 = round(percentile(durations, 50), 1), round(percentile(durations, 95), 1)
        rows.append((service, step, len(spans), sum(map(_failed, spans)), p50, p95))
    rows.sort(key=lambda r: (-_value(r[5]), str(r[0]), str(r[1])))
    return Table(("service", "step_name", "tries", "failed", "p50_ms", "p95_ms"), rows)


@panel("errors-over-time", [metrics.STATE_ENTERED], Series, "661954bc017f")
def _errors_over_time(data: Telemetry, view: View) -> Figure:
    return state_series(data, view, (ProcessState.ERROR.value, ProcessState.COMPENSATING.value))


@panel("compensations", [metrics.STEP_COMPENSATIONS], Table, "3eadfcef34ae")
def _compensations(data: Telemetry, view: View) -> Figure:
    rows: list[tuple[Cell, ...]] = [
        (
            _text(inc.attributes.get(tracing.WORKFLOW)),
            _text(inc.attributes.get(tracing.STEP)),
            _number(inc.value),
        )
        for inc in totals(data.points, metrics.STEP_COMPENSATIONS)
    ]
    rows.sort(key=lambda r: (-_value(r[2]), str(r[0]), str(r[1])))
    return Table(("workflow", "step_name", "undone"), rows)


@panel("orders-in-error", [telemetry.ORDER_ENTERED_ERROR], Table, "ed113d6f37f0")
def _orders_in_error(data: Telemetry, view: View) -> Figure:
    traces = _order_traces(data.spans)
    rows: list[tuple[Cell, ...]] = []
    for event in _events(data, telemetry.ORDER_ENTERED_ERROR):
        f = event.fields
        order = f.get("orderId", "")
        rows.append(
            (
                _Time(event.time_ns),
                order,
                f.get("step", ""),
                f.get("phase", ""),
                _int_or_text(f.get("failureCount", "")),
                f.get("reason", ""),
                traces.get(order, ""),
            )
        )
    return Table(
        ("timestamp", "orderId", "step_name", "phase", "failures", "reason", "operation_Id"),
        rows,
        [
            _event_note(telemetry.ORDER_ENTERED_ERROR)
            + " A log line has no trace id: operation_Id is the order's trace, from its spans."
        ],
    )


def _order_traces(spans: Iterable[SpanRecord]) -> dict[str, str]:
    """Each order's trace: its submission's, else that of its first span."""
    found: dict[str, tuple[bool, int, str]] = {}
    for span in spans:
        order = span.attributes.get(tracing.ORDER_ID)
        if not isinstance(order, str):
            continue
        rank = (span.name != tracing.ORDER_SUBMIT, span.start_ns, span.trace_id)
        if order not in found or rank < found[order]:
            found[order] = rank
    return {order: rank[2] for order, rank in found.items()}


@panel("retries-by-step", [metrics.STEP_RETRIES], Table, "a02e927266d5")
def _retries_by_step(data: Telemetry, view: View) -> Figure:
    return _pivot(data, metrics.STEP_RETRIES, "step_name", tracing.STEP, "by")


@panel("retries-over-time", [metrics.STEP_RETRIES], Series, "cd9a04e8d906")
def _retries_over_time(data: Telemetry, view: View) -> Figure:
    lines: dict[str, dict[int, float]] = defaultdict(dict)
    for inc in counter_increases(data.points, metrics.STEP_RETRIES):
        line = lines[_text(inc.attributes.get("by"))]
        bin_start = view.bin(inc.time_ns)
        line[bin_start] = line.get(bin_start, 0.0) + inc.value
    return Series("retries", dict(sorted(lines.items())), additive=True)


BREAKER_STATES = {level: state for state, level in metrics.BREAKER_LEVELS.items()}
BREAKER_RECENT_NS = 10 * 60 * SECOND


@panel("breakers-now", [metrics.BREAKER_STATE], Table, "71babe11cdbe")
def _breakers_now(data: Telemetry, view: View) -> Figure:
    latest = _latest(
        gauge_points(data.points, metrics.BREAKER_STATE),
        lambda p: (_text(p.attributes.get(tracing.SERVICE)), p.service_instance_id or ""),
    )
    rows: list[tuple[Cell, ...]] = []
    if latest:
        newest = max(p.time_ns for p in latest.values())
        recent: dict[str, list[MetricPoint]] = defaultdict(list)
        for (service, _), point in latest.items():
            if point.time_ns > newest - BREAKER_RECENT_NS:
                recent[service].append(point)
        for service, points in sorted(recent.items()):
            values = [float(p.value or 0) for p in points]
            level = max(values)
            state = "open" if level >= 2 else "half-open" if level >= 1 else "closed"
            rows.append(
                (
                    service,
                    state,
                    sum(v == 2 for v in values),
                    sum(v == 1 for v in values),
                    len(points),
                    _Time(max(p.time_ns for p in points)),
                )
            )
    return Table(
        ("service", "state", "open_on", "half_open_on", "instances", "measured"),
        rows,
        ["Locally an instance is a worker process (`service.instance.id`)."],
    )


@panel("breakers-over-time", [metrics.BREAKER_STATE], Series, "694a25aa6a5b")
def _breakers_over_time(data: Telemetry, view: View) -> Figure:
    lines = _max_per_bin(
        data, view, metrics.BREAKER_STATE, lambda p: _text(p.attributes.get(tracing.SERVICE))
    )
    return Series("state", lines, y_max=max(metrics.BREAKER_LEVELS.values()))


@panel("queue-messages", [metrics.QUEUE_MESSAGES], Series, "e7b5332464f0")
def _queue_messages(data: Telemetry, view: View) -> Figure:
    lines = _max_per_bin(data, view, metrics.QUEUE_MESSAGES, lambda p: _text(p.attributes.get("queue")))
    return Series("messages", lines)


@panel("queue-age", [metrics.QUEUE_AGE], Series, "ccc0356d4185")
def _queue_age(data: Telemetry, view: View) -> Figure:
    lines = _max_per_bin(data, view, metrics.QUEUE_AGE, lambda p: _text(p.attributes.get("queue")))
    return Series("oldest_s", lines)


@panel("dead-letters", [metrics.QUEUE_DEAD_LETTERS], Table, "d34ee846500d")
def _dead_letters(data: Telemetry, view: View) -> Figure:
    latest = _latest(
        gauge_points(data.points, metrics.QUEUE_DEAD_LETTERS), lambda p: (_text(p.attributes.get("queue")),)
    )
    rows: list[tuple[Cell, ...]] = [
        (queue, _number(p.value or 0), _Time(p.time_ns)) for (queue,), p in latest.items()
    ]
    rows.sort(key=lambda r: (-_value(r[1]), str(r[0])))
    return Table(("queue", "dead_letters", "measured"), rows)


@panel("poison-messages", [telemetry.POISON_MESSAGE], Table, "df25d242934c")
def _poison_messages(data: Telemetry, view: View) -> Figure:
    rows: list[tuple[Cell, ...]] = [
        (
            _Time(e.time_ns),
            e.fields.get("queue", ""),
            e.fields.get("messageId", ""),
            _int_or_text(e.fields.get("deliveryCount", "")),
            e.fields.get("reason", ""),
        )
        for e in _events(data, telemetry.POISON_MESSAGE)
    ]
    return Table(
        ("timestamp", "queue", "messageId", "deliveries", "reason"),
        rows,
        [_event_note(telemetry.POISON_MESSAGE)],
    )


def _waiting_for(point: MetricPoint) -> str:
    return _text(point.attributes.get("waiting.for"))


@panel("waiting-now", [metrics.WAITING], Table, "781da65bf178")
def _waiting_now(data: Telemetry, view: View) -> Figure:
    latest = _latest(gauge_points(data.points, metrics.WAITING), _waiting_for)
    rows: list[tuple[Cell, ...]] = [
        (waiting_for, _number(p.value or 0), _Time(p.time_ns)) for waiting_for, p in sorted(latest.items())
    ]
    return Table(("waiting_for", "orders", "measured"), rows)


@panel("waiting-over-time", [metrics.WAITING], Series, "e65a667844c6")
def _waiting_over_time(data: Telemetry, view: View) -> Figure:
    lines = _max_per_bin(data, view, metrics.WAITING, _waiting_for)
    return Series("orders", lines)


@panel("sweep-duration", [metrics.SWEEP_DURATION], Series, "656dd3225985")
def _sweep_duration(data: Telemetry, view: View) -> Figure:
    count: dict[int, int] = defaultdict(int)
    total: dict[int, float] = defaultdict(float)
    longest: dict[int, float] = {}
    bounded = False
    for inc in histogram_increases(data.points, metrics.SWEEP_DURATION):
        bin_start = view.bin(inc.time_ns)
        count[bin_start] += inc.count
        total[bin_start] += inc.sum
        if inc.max is not None:
            longest[bin_start] = max(longest.get(bin_start, -math.inf), inc.max)
            bounded = bounded or not inc.max_exact
    lines = {"avg_s": {b: total[b] / count[b] for b in count if count[b]}, "max_s": longest}
    series = Series("s", lines if count else {})
    if bounded:
        series.notes.append(
            "Locally the histograms are cumulative: max_s is exact where a sweep set a process's new "
            "longest or was the only one between two of its writes, else the upper edge of its bucket."
        )
    return series


@panel("order-trace", [], Table, "f3851c072bda")
def _order_trace(data: Telemetry, view: View) -> Figure:
    traces: dict[str, list[SpanRecord]] = defaultdict(list)
    if view.order_id:
        for span in data.spans:
            if _text(span.attributes.get(tracing.ORDER_ID)) == view.order_id:
                traces[span.trace_id].append(span)
    rows: list[tuple[Cell, ...]] = []
    for trace_id, spans in traces.items():
        names = list(dict.fromkeys(s.name for s in sorted(spans, key=lambda s: s.start_ns)))[:20]
        rows.append(
            (
                trace_id,
                _Time(min(s.start_ns for s in spans)),
                _Time(max(s.start_ns for s in spans)),
                len(spans),
                sum(map(_failed, spans)),
                ", ".join(names),
            )
        )
    rows.sort(key=lambda r: r[1].time_ns if isinstance(r[1], _Time) else 0)
    return Table(("operation_Id", "started", "ended", "spans", "failed", "names"), rows)


# ---- the workbook, and the check that every query item has its equivalent ------------------------------
def load_workbook(path: Path = WORKBOOK) -> dict[str, Any]:
    """The workbook's JSON content."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise PreviewError(f"{path}: not a workbook (no items)")
    return document


def _title(item: Mapping[str, Any]) -> str:
    return str(item.get("content", {}).get("title") or item.get("name") or "")


def check_panels(workbook: Mapping[str, Any], panels: Mapping[str, Panel] = PANELS) -> None:
    """Raise PreviewError, naming each panel, unless every query item of ``workbook`` has a local
    equivalent written for its query as it is (its digest), reading the names it filters on and yielding
    what its visualization draws; every equivalent has its item; every item is of a type the preview
    draws."""
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(workbook.get("items", [])):
        kind, name = item.get("type"), item.get("name")
        if kind in (TEXT_ITEM, PARAMETERS_ITEM):
            continue
        if kind != QUERY_ITEM:
            problems.append(f"item {index} ({name!r}): type {kind} is not one the preview draws")
            continue
        content = item.get("content", {})
        label = f"panel {name!r} ({_title(item)!r})"
        if not name:
            problems.append(f"query item {index} ({_title(item)!r}) has no name to key its local equivalent")
            continue
        seen.add(name)
        equivalent = panels.get(name)
        if equivalent is None:
            problems.append(f"{label} has no local equivalent in devhost.workbook_preview.PANELS")
            continue
        query = str(content.get("query", ""))
        if query_digest(query) != equivalent.query:
            problems.append(
                f"{label}: its query changed (digest {query_digest(query)}, its local equivalent was written "
                f"for {equivalent.query}): make the equivalent compute what the query does now, then give "
                "it the new digest"
            )
        reads = set(NAME_FILTER.findall(query))
        if reads != equivalent.reads:
            problems.append(
                f"{label}: its query reads {sorted(reads)}, its local equivalent {sorted(equivalent.reads)}"
            )
        visualization = content.get("visualization", "table")
        drawable = SERIES_VISUALIZATIONS if equivalent.shape is Series else TABLE_VISUALIZATIONS
        if visualization not in drawable:
            problems.append(
                f"{label}: visualization {visualization!r}, but its local equivalent yields a "
                f"{equivalent.shape.__name__} (drawn as {', '.join(sorted(drawable))})"
            )
    for name in sorted(set(panels) - seen):
        problems.append(
            f"panel {name!r} of devhost.workbook_preview.PANELS has no query item in the workbook"
        )
    if problems:
        raise PreviewError("the workbook and its local preview disagree:\n  " + "\n  ".join(problems))


def compute(workbook: Mapping[str, Any], data: Telemetry, view: View) -> dict[str, Figure]:
    """Every query item's figure, by the item's name (after :func:`check_panels`)."""
    check_panels(workbook)
    figures: dict[str, Figure] = {}
    for item in workbook["items"]:
        if item.get("type") == QUERY_ITEM:
            equivalent = PANELS[item["name"]]
            figure = equivalent.compute(data, view)
            if not isinstance(figure, equivalent.shape):
                raise PreviewError(f"panel {item['name']!r}: computed a {type(figure).__name__}")
            empty = not figure.rows if isinstance(figure, Table) else not figure.lines
            if empty and equivalent.reads:
                names = _join([f"`{n}`" for n in sorted(equivalent.reads)])
                figure.notes.insert(0, f"This run recorded no {names}.")
            figures[item["name"]] = figure
    return figures


# ---- formatting ----------------------------------------------------------------------------------------
def _number(value: float | int) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _clock(time_ns: int, millis: bool = False) -> str:
    moment = datetime.fromtimestamp(time_ns / SECOND, UTC)
    return moment.strftime("%H:%M:%S.%f")[:12] if millis else moment.strftime("%H:%M:%S")


def _duration(ns: int) -> str:
    seconds = ns / SECOND
    if seconds < 60:
        return f"{seconds:g} s"
    if seconds < 3600:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def _format(value: Cell | _Time) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        return f"{value:,.3f}".rstrip("0").rstrip(".") if not value.is_integer() else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _inline(text: str) -> str:
    """Markdown's inline code, bold and emphasis, escaped."""
    parts = text.split("`")
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        part = html.escape(part)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def markdown(text: str) -> str:
    """The little markdown a workbook's text items use: headings, paragraphs, lists, inline marks."""
    blocks: list[str] = []
    listing: tuple[str, list[str]] | None = None

    def close_list() -> None:
        nonlocal listing
        if listing is not None:
            tag, entries = listing
            blocks.append(f"<{tag}>" + "".join(f"<li>{e}</li>" for e in entries) + f"</{tag}>")
            listing = None

    for line in text.splitlines():
        stripped = line.strip()
        heading = re.match(r"(#{1,6})\s+(.*)", stripped)
        ordered = re.match(r"\d+\.\s+(.*)", stripped)
        bullet = re.match(r"[-*]\s+(.*)", stripped)
        if ordered or bullet:
            tag = "ol" if ordered else "ul"
            if listing is None or listing[0] != tag:
                close_list()
                listing = (tag, [])
            listing[1].append(_inline((ordered or bullet)[1]))  # type: ignore[index]
            continue
        close_list()
        if not stripped:
            continue
        if heading:
            level = len(heading[1])
            blocks.append(f"<h{level}>{_inline(heading[2])}</h{level}>")
        else:
            blocks.append(f"<p>{_inline(stripped)}</p>")
    close_list()
    return "\n".join(blocks)


# ---- charts --------------------------------------------------------------------------------------------
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#6f6f6f", "#000000")
# Colours that mean something wherever the label appears.
COLOURS = {
    ProcessState.PROCESSED.value: "#009e73",
    ProcessState.COMPENSATED.value: "#e69f00",
    ProcessState.ERROR.value: "#d62728",
    ProcessState.COMPENSATING.value: "#cc79a7",
}
PAGE_WIDTH = 1400
CONTENT_WIDTH = 1360  # the page's width less its margins
CARD_CHROME = 42  # a card's padding and border, both sides
CHART_HEIGHT = 230
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 24, 24, 30


def _colour(label: str, index: int) -> str:
    return COLOURS.get(label, PALETTE[index % len(PALETTE)])


def _nice_step(span: float, ticks: int) -> float:
    raw = span / max(ticks, 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


TIME_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _time_ticks(start: int, end: int, width: float, bin_ns: int) -> list[int]:
    """Round times between ``start`` and ``end``, a bin or more apart, at most one per 90 px."""
    most = max(2, int(width // 90))
    step = TIME_STEPS_S[-1] * SECOND
    for seconds in TIME_STEPS_S:
        if seconds * SECOND >= bin_ns and (end - start) / (seconds * SECOND) <= most:
            step = seconds * SECOND
            break
    first = start - start % step + (step if start % step else 0)
    return list(range(first, end + 1, step))


def line_chart(series: Series, view: View, width: int) -> str:
    """``series`` as an inline SVG line chart over the view's whole time range."""
    height = CHART_HEIGHT
    left, right = MARGIN_LEFT, width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, height - MARGIN_BOTTOM
    x0, x1 = view.bin(view.start_ns), view.bin(view.end_ns)
    pad = view.bin_ns // 2
    x0, x1 = x0 - pad, x1 + pad
    values = [v for line in series.lines.values() for v in line.values()]
    # A little room above the highest point, or exactly a gauge's highest level.
    reach = max(max(values, default=0.0) * 1.05, series.y_max or 0.0) or 1.0
    step = _nice_step(reach, 4)
    if all(float(v).is_integer() for v in values):
        step = max(step, 1.0)
    y_top = step * max(1, math.ceil(reach / step - 1e-9))

    def x(t: float) -> float:
        return left + (t - x0) / (x1 - x0) * (right - left)

    def y(v: float) -> float:
        return bottom - v / y_top * (bottom - top)

    parts = [
        f'<svg class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(series.value)} over time">'
    ]
    tick = 0.0
    while tick <= y_top + step / 1000:
        ty = y(tick)
        parts.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{ty:.1f}" y2="{ty:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">{_short(tick)}</text>'
        )
        tick += step
    for t in _time_ticks(int(x0), int(x1), right - left, view.bin_ns):
        tx = x(t)
        parts.append(f'<line class="axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{bottom}" y2="{bottom + 4}"/>')
        parts.append(
            f'<text class="tick" x="{tx:.1f}" y="{bottom + 17}" text-anchor="middle">{_clock(t)}</text>'
        )
    parts.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    parts.append(f'<text class="unit" x="4" y="{top - 10}">{html.escape(series.value)}</text>')
    for index, (label, points) in enumerate(series.lines.items()):
        colour = _colour(label, index)
        ordered = sorted(points.items())
        coords = " ".join(f"{x(b):.1f},{y(v):.1f}" for b, v in ordered)
        escaped = html.escape(label, quote=True)
        parts.append(f'<g class="series" data-series="{escaped}">')
        if len(ordered) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2.2" points="{coords}"/>')
        for b, v in ordered:
            parts.append(
                f'<circle cx="{x(b):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}" data-bin="{_clock(b)}" '
                f'data-value="{_format(v)}"><title>{escaped} {_clock(b)}: {_short(v)}</title></circle>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{_colour(label, i)}"></i>{html.escape(label or "(empty)")}'
        f"<small>{_summary(points, series.additive)}</small></span>"
        for i, (label, points) in enumerate(series.lines.items())
    )
    return "".join(parts) + (f'<div class="legend">{legend}</div>' if legend else "")


def _summary(points: Mapping[int, float], counts: bool) -> str:
    """What a legend says next to a series: a count's total, else its highest."""
    if counts:
        return f"total <b>{_short(sum(points.values()))}</b>"
    return f"max <b>{_short(max(points.values(), default=0.0))}</b>"


def _short(value: float) -> str:
    """A number for an axis or a legend: fewer decimals the bigger it is."""
    size = abs(value)
    digits = 0 if size >= 100 or float(value).is_integer() else 1 if size >= 10 else 2 if size >= 1 else 3
    return _format(round(value, digits))


def bar_chart(table: Table, width: int) -> str:
    """A table's first numeric column as horizontal bars, labelled by its first column."""
    numeric = _numeric_column(table)
    if numeric is None or not table.rows:
        return render_table(table)
    high = max(_value(row[numeric]) for row in table.rows) or 1.0
    rows = []
    for index, row in enumerate(table.rows):
        share = _value(row[numeric]) / high * 100
        rows.append(
            f'<div class="bar"><span>{html.escape(_format(row[0]))}</span><div><i style="width:{share:.1f}%;'
            f'background:{_colour(str(row[0]), index)}"></i></div><b>{_format(row[numeric])}</b></div>'
        )
    return f'<div class="bars" style="max-width:{width}px">' + "".join(rows) + "</div>"


def tiles(table: Table) -> str:
    """Each row as a tile: its first column, and its first numeric column large."""
    numeric = _numeric_column(table)
    if numeric is None or not table.rows:
        return render_table(table)
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile"><span>{html.escape(_format(row[0]))}</span>'
            f"<b>{_format(row[numeric])}</b></div>"
            for row in table.rows
        )
        + "</div>"
    )


def _numeric_column(table: Table) -> int | None:
    for index in range(1, len(table.columns)):
        cells = [row[index] for row in table.rows if row[index] is not None]
        if cells and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in cells):
            return index
    return None


WRAP_AT = 40  # characters
EMPTY = '<p class="empty">The query returned no results.</p>'


def render_table(table: Table) -> str:
    """A table as a workbook shows it; numbers right-aligned."""
    if not table.rows:
        return EMPTY
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in table.rows)
        for i in range(len(table.columns))
    ]
    # Long text may wrap; anything else stays on one line (a table too wide for its card is zoomed out).
    long = [any(len(_format(row[i])) > WRAP_AT for row in table.rows) for i in range(len(table.columns))]
    classes = [
        " ".join(c for c, on in (("num", numeric[i]), ("wrap", long[i])) if on) for i in range(len(numeric))
    ]
    head = "".join(f'<th class="{classes[i]}">{html.escape(c)}</th>' for i, c in enumerate(table.columns))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{classes[i]}">{html.escape(_format(c))}</td>' for i, c in enumerate(row))
        + "</tr>"
        for row in table.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ---- the page ------------------------------------------------------------------------------------------
STYLE = """
* { box-sizing: border-box; }
body { margin: 0; background: #faf9f8; color: #201f1e; width: 1400px;
  font: 14px/1.45 "Segoe UI", "Liberation Sans", Arial, "DejaVu Sans", sans-serif; }
main { padding: 16px 20px 8px; }
.banner { background: #fff4ce; border: 1px solid #f0d88a; border-radius: 4px; padding: 8px 14px;
  margin-bottom: 12px; font-size: 13px; }
.banner strong { font-weight: 600; }
.items { display: flex; flex-wrap: wrap; margin: 0 -6px; align-items: stretch; }
.item { padding: 6px; }
.text h1 { font-size: 26px; font-weight: 600; margin: 4px 0 6px; }
.text h2 { font-size: 19px; font-weight: 600; margin: 14px 0 2px; padding-top: 8px;
  border-top: 1px solid #e1dfdd; }
.text p, .text ol { margin: 4px 0; color: #3b3a39; max-width: 1200px; }
code { font-family: "DejaVu Sans Mono", Consolas, monospace; font-size: 12px; background: #f3f2f1;
  padding: 0 3px; border-radius: 3px; }
.pills { display: flex; gap: 10px; flex-wrap: wrap; }
.pill { background: #fff; border: 1px solid #c8c6c4; border-radius: 14px; padding: 3px 12px;
  font-size: 13px; }
.pill span { color: #605e5c; margin-right: 4px; }
.pill em { color: #605e5c; font-style: normal; font-size: 12px; }
.card { background: #fff; border: 1px solid #e1dfdd; border-radius: 4px; padding: 10px 14px 12px;
  height: 100%; overflow: hidden; }
.card h3 { font-size: 15px; font-weight: 600; margin: 0 0 2px; }
.card .kind { color: #8a8886; font-size: 11.5px; margin-bottom: 6px; }
.card .note { color: #605e5c; font-size: 12px; margin: 6px 0 0; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg .grid { stroke: #edebe9; }
svg .axis { stroke: #a19f9d; }
svg text { font: 11.5px "Segoe UI", "Liberation Sans", Arial, sans-serif; fill: #605e5c; }
svg .unit { font-weight: 600; }
svg .empty { font-size: 13px; fill: #8a8886; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12.5px; margin-top: 4px; }
.legend .key { display: inline-flex; align-items: center; gap: 6px; }
.legend i { width: 12px; height: 12px; border-radius: 2px; display: inline-block; }
.legend small { color: #605e5c; font-size: 12px; } .legend b { color: #201f1e; font-weight: 600; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th { text-align: left; font-weight: 600; color: #3b3a39; border-bottom: 2px solid #e1dfdd; padding: 4px 8px; }
td { border-bottom: 1px solid #f3f2f1; padding: 3px 8px; vertical-align: top; }
th, td { white-space: nowrap; } td.wrap { white-space: normal; }
table.tight th, table.tight td { padding: 3px 4px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
p.empty { color: #8a8886; margin: 10px 0; }
.bars .bar { display: grid; grid-template-columns: 30% 1fr 60px; gap: 8px; align-items: center;
  margin: 3px 0; }
.bars .bar div { background: #f3f2f1; height: 14px; } .bars .bar i { display: block; height: 14px; }
.tiles { display: flex; flex-wrap: wrap; gap: 8px; }
.tile { border: 1px solid #e1dfdd; padding: 8px 14px; min-width: 120px; }
.tile span { display: block; color: #605e5c; font-size: 12px; } .tile b { font-size: 22px; font-weight: 600; }
footer { color: #605e5c; font-size: 12.5px; border-top: 1px solid #e1dfdd; margin: 14px 20px 0;
  padding: 8px 0 16px; }
"""


# A table wider than its card gets narrower padding, then a smaller font until it fits (down to 9 px): a
# screenshot cannot scroll.
FIT_TABLES = """
for (const table of document.querySelectorAll(".card table")) {
  const card = table.parentElement, style = getComputedStyle(card);
  const room = card.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  if (table.scrollWidth > room) table.classList.add("tight");
  let size = parseFloat(getComputedStyle(table).fontSize);
  while (table.scrollWidth > room && size > 9) {
    size -= 0.5;
    table.style.fontSize = size + "px";
  }
}
"""


def _width(item: Mapping[str, Any]) -> float:
    try:
        return min(100.0, max(1.0, float(item.get("customWidth") or 100)))
    except (TypeError, ValueError):
        return 100.0


def _parameters(item: Mapping[str, Any], view: View) -> str:
    pills = []
    for parameter in item.get("content", {}).get("parameters", []):
        label = html.escape(str(parameter.get("label") or parameter.get("name")))
        if parameter.get("type") == 4:  # a time range: the data's
            start = datetime.fromtimestamp(view.start_ns / SECOND, UTC)
            value = (
                f"{start:%Y-%m-%d %H:%M:%S} \u2013 {_clock(view.end_ns)} UTC "
                f"<em>(the local run: {round((view.end_ns - view.start_ns) / SECOND)} s)</em>"
            )
        elif parameter.get("name") == "OrderId":
            value = html.escape(view.order_id or "(empty)")
            if view.order_note:
                value += f" <em>({html.escape(view.order_note)})</em>"
        else:
            value = html.escape(str(parameter.get("value") or "(empty)"))
        pills.append(f'<div class="pill"><span>{label}:</span>{value}</div>')
    return '<div class="pills">' + "".join(pills) + "</div>"


def _panel(item: Mapping[str, Any], figure: Figure, view: View, width: float) -> str:
    content = item.get("content", {})
    visualization = str(content.get("visualization", "table"))
    inner = int(width / 100 * (CONTENT_WIDTH + 12)) - 12 - CARD_CHROME
    kind = visualization
    notes = list(figure.notes)
    if isinstance(figure, Series):
        kind += f" · per {view.bin_label} here ({AZURE_BIN} in Azure), times UTC"
        drawn = line_chart(figure, view, inner) if figure.lines else EMPTY
    elif visualization == "barchart":
        drawn = bar_chart(figure, inner)
    elif visualization == "tiles":
        drawn = tiles(figure)
    else:
        drawn = render_table(figure)
    note = "".join(f'<p class="note">{_inline(n)}</p>' for n in notes)
    heading = f'<h3>{html.escape(_title(item))}</h3><div class="kind">{html.escape(kind)}</div>'
    return (
        f'<section class="card panel" data-name="{html.escape(str(item["name"]))}">'
        f"{heading}{drawn}{note}</section>"
    )


def render(workbook: Mapping[str, Any], data: Telemetry, view: View, source: str = WORKBOOK_SOURCE) -> str:
    """The whole page: every item of ``workbook`` in order, drawn from ``data``."""
    figures = compute(workbook, data, view)
    items = []
    for item in workbook["items"]:
        kind, width = item.get("type"), _width(item)
        if kind == TEXT_ITEM:
            body = f'<div class="text">{markdown(str(item.get("content", {}).get("json", "")))}</div>'
        elif kind == PARAMETERS_ITEM:
            body = _parameters(item, view)
        else:
            body = _panel(item, figures[item["name"]], view, width)
        items.append(f'<div class="item" style="width:{width:g}%">{body}</div>')
    data_dir = html.escape(str(data.data_dir))
    title = html.escape(_workbook_title(workbook))
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title} — workbook preview (local)</title>'
        f"<style>{STYLE}</style></head><body><main>"
        '<div class="banner"><strong>Local preview</strong> of the Azure Monitor workbook '
        f"<code>{html.escape(source)}</code>, drawn from a local run's telemetry ({data_dir}), not from "
        f"Application Insights. Time series are binned per {view.bin_label} here ({AZURE_BIN} in Azure)."
        "</div>"
        f'<div class="items">{"".join(items)}</div></main>'
        f"<footer>Drawn locally from {data_dir}'s telemetry by devhost.workbook_preview; in Azure the same "
        f"panels query Application Insights ({html.escape(source)}).</footer>"
        f"<script>{FIT_TABLES}</script></body></html>\n"
    )


def _workbook_title(workbook: Mapping[str, Any]) -> str:
    for item in workbook.get("items", []):
        if item.get("type") == TEXT_ITEM:
            found = re.search(r"^#\s+(.+)$", str(item.get("content", {}).get("json", "")), re.MULTILINE)
            if found:
                return found[1].strip()
    return "Workbook"


# ---- the screenshot ------------------------------------------------------------------------------------
def screenshot(page: Path, png: Path, width: int = PAGE_WIDTH) -> tuple[int, int]:
    """Save the whole of ``page`` (an HTML file) as ``png``, ``width`` pixels wide, with Debian's headless
    chromium and its chromedriver; returns the image's size."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        raise PreviewError("--png needs Chromium and its driver: apt-get install chromium chromium-driver")
    with tempfile.TemporaryDirectory(prefix="workbook-preview-") as tmp:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (
            "--headless=new",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-dev-shm-usage",
            f"--window-size={width},1000",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ):
            options.add_argument(flag)
        service = Service(executable_path=driver, log_output=str(Path(tmp) / "chromedriver.log"))
        chrome = webdriver.Chrome(options=options, service=service)
        try:
            chrome.get(page.resolve().as_uri())
            height = int(chrome.execute_script("return Math.ceil(document.documentElement.scrollHeight)"))
            metrics_override = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics_override)
            shot = chrome.execute_cdp_cmd(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
                },
            )
        finally:
            chrome.quit()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(base64.b64decode(shot["data"]))
    return width, height


# ---- the command ---------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m devhost.workbook_preview", description=__doc__.splitlines()[0]
    )
    p.add_argument("--data-dir", type=Path, required=True, help="a devhost data folder (with telemetry/)")
    p.add_argument("--out", type=Path, required=True, help="the HTML page to write")
    p.add_argument("--png", type=Path, help="also screenshot the page to this PNG (needs chromium)")
    p.add_argument(
        "--workbook", type=Path, default=WORKBOOK, help=f"the workbook (default {WORKBOOK_SOURCE})"
    )
    p.add_argument(
        "--bin", type=float, help="seconds per time-series bin (default: 10 s or more, by the range)"
    )
    p.add_argument("--order-id", help="the Order id parameter (default: the order with the most spans)")
    args = p.parse_args(argv)
    if args.bin is not None and args.bin <= 0:
        p.error("--bin must be a number of seconds above 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m devhost.workbook_preview``."""
    args = parse_args(argv)
    try:
        workbook = load_workbook(args.workbook)
        check_panels(workbook)
        data = Telemetry.load(args.data_dir)
        view = make_view(data, args.bin, args.order_id)
        page = render(workbook, data, view, _source(args.workbook))
    except PreviewError as exc:
        print(f"workbook_preview: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out}")
    if args.png:
        try:
            size = screenshot(args.out, args.png)
        except PreviewError as exc:
            print(f"workbook_preview: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.png} ({size[0]}x{size[1]})")
    return 0


def _source(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
