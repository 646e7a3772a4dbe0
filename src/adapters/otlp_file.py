"""Spans and metrics as OTLP/JSON lines in local files, and readers for them (the devhost's telemetry).

Each export appends one line: one OTLP export request (``ExportTraceServiceRequest`` or
``ExportMetricsServiceRequest``) in OTLP/JSON, encoded by the OpenTelemetry SDK's own OTLP encoders
(opentelemetry-exporter-otlp-proto-common) and protobuf's JSON mapping: ids as lowercase hex, enums as
numbers, times and 64-bit integers as decimal strings, fields at their default value left out (the readers
take a missing field as its default, as OTLP/JSON's receivers must). Several processes append to the same
file, so a line is written with a single ``os.write`` on a descriptor opened with ``O_APPEND``: the kernel
places each write whole at the end, and lines of different processes never interleave. Metrics are
cumulative, so each process's latest point of a series holds that process's total; :func:`metric_totals`
adds them up over processes, told apart by the resource attribute ``service.instance.id``.

A reader may see the last line while it is being written: the readers skip a torn last line.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common import metrics_encoder, trace_encoder
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
    _Gauge,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger("adapters.otlp_file")

# Where the devhost keeps them: <data-dir>/telemetry/spans.jsonl and metrics.jsonl.
TELEMETRY_DIR = "telemetry"
SPANS_FILE = "spans.jsonl"
METRICS_FILE = "metrics.jsonl"

SERVICE_NAME = "service.name"
SERVICE_INSTANCE_ID = "service.instance.id"

# An attribute value as read back: OTLP's AnyValue, arrays as tuples (so that values stay hashable).
type AttributeValue = str | bool | int | float | bytes | tuple[AttributeValue, ...] | None

SpanKindName = Literal["internal", "server", "client", "producer", "consumer"]
StatusName = Literal["unset", "ok", "error"]
MetricKind = Literal["sum", "gauge", "histogram", "exponential_histogram"]

# OTLP's SpanKind numbers (0 is UNSPECIFIED) and status codes.
_KIND_NAMES: dict[int, SpanKindName] = {
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
_STATUS_NAMES: dict[int, StatusName] = {0: "unset", 1: "ok", 2: "error"}
_DELTA = 1  # OTLP's AggregationTemporality DELTA (2 is CUMULATIVE)


def spans_path(data_dir: Path) -> Path:
    """The devhost's span file under ``data_dir``."""
    return data_dir / TELEMETRY_DIR / SPANS_FILE


def metrics_path(data_dir: Path) -> Path:
    """The devhost's metric file under ``data_dir``."""
    return data_dir / TELEMETRY_DIR / METRICS_FILE


# ---- writing ---------------------------------------------------------------------------------------
class _LineAppender:
    """Appends JSON documents to a file, one line per document, one ``os.write`` per line."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self._what = what
        self._warned = False
        self.closed = False

    def append(self, build: Callable[[], Mapping[str, Any] | None]) -> bool:
        """Write the document ``build`` makes as one line (nothing if it makes None).

        False, logged on the first failure only, if it could not be made or written.
        """
        try:
            document = build()
            if document is None:
                return True
            # allow_nan=False: a stray NaN would make the line invalid JSON; doubles are encoded first.
            line = json.dumps(document, separators=(",", ":"), allow_nan=False).encode() + b"\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Opened per line: nothing to inherit across a fork, and a deleted folder is simply recreated.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                written = os.write(fd, line)
            finally:
                os.close(fd)
            if written != len(line):
                raise OSError(f"short write: {written} of {len(line)} bytes")
        except Exception:
            # An exporter must never raise into the SDK (this also covers a value it cannot encode); one
            # warning, not one per export.
            if not self._warned:
                self._warned = True
                log.warning("cannot write %s to %s", self._what, self.path, exc_info=True)
            else:
                log.debug("cannot write %s to %s", self._what, self.path, exc_info=True)
            return False
        return True


class JsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans to ``path`` as one OTLP/JSON ``ExportTraceServiceRequest`` line."""

    def __init__(self, path: Path) -> None:
        self._out = _LineAppender(path, "spans")

    @property
    def path(self) -> Path:
        """The file the spans go to."""
        return self._out.path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` as one line; FAILURE (never an exception) if they could not be written."""
        if self._out.closed:
            return SpanExportResult.FAILURE
        written = self._out.append(lambda: encode_spans(spans) if spans else None)
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Refuse further exports (nothing is buffered)."""
        self._out.closed = True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing to flush: every export is written before it returns."""
        return True


class JsonLinesMetricExporter(MetricExporter):
    """Appends each collection to ``path`` as one OTLP/JSON ``ExportMetricsServiceRequest`` line.

    Every counter and histogram is cumulative, so a process's latest point of a series is its total so far.
    A gauge is reported only by a process that set it since its last collection (delta): a cumulative
    gauge would repeat a process's last value, stamped with each collection's time, long after another
    process measured anew.
    """

    def __init__(self, path: Path) -> None:
        cumulative = AggregationTemporality.CUMULATIVE
        super().__init__(
            preferred_temporality={
                Counter: cumulative,
                UpDownCounter: cumulative,
                Histogram: cumulative,
                _Gauge: AggregationTemporality.DELTA,
                ObservableCounter: cumulative,
                ObservableUpDownCounter: cumulative,
                ObservableGauge: cumulative,
            }
        )
        self._out = _LineAppender(path, "metrics")

    @property
    def path(self) -> Path:
        """The file the metrics go to."""
        return self._out.path

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Write ``metrics_data`` as one line; FAILURE (never an exception) if it could not be written."""
        if self._out.closed:
            return MetricExportResult.FAILURE

        def build() -> dict[str, Any] | None:
            document = encode_metrics(metrics_data)
            return document if document["resourceMetrics"] else None  # nothing measured yet

        return MetricExportResult.SUCCESS if self._out.append(build) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing to flush: every export is written before it returns."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Refuse further exports (nothing is buffered)."""
        self._out.closed = True


# ---- OTLP/JSON encoding ----------------------------------------------------------------------------
# The SDK's own encoders make the protobuf messages; protobuf's JSON mapping writes them with OTLP/JSON's
# rules (the OTLP specification, "JSON Protobuf Encoding"): fields in lowerCamelCase, enums as numbers,
# 64-bit integers as decimal strings, NaN and infinities spelled out, fields at their default value left
# out; and trace and span ids, which the mapping would write in base64, as lowercase hex.
_IDS = frozenset({"traceId", "spanId", "parentSpanId"})  # of spans, links and exemplars


def encode_spans(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as an OTLP/JSON ``ExportTraceServiceRequest``, grouped by resource and scope."""
    return _otlp_json(trace_encoder.encode_spans(spans))


def encode_metrics(metrics_data: MetricsData) -> dict[str, Any]:
    """``metrics_data`` as an OTLP/JSON ``ExportMetricsServiceRequest`` (empty scopes left out)."""
    document = _otlp_json(metrics_encoder.encode_metrics(metrics_data))
    resource_metrics = []
    for rm in document.get("resourceMetrics", []):
        rm["scopeMetrics"] = [sm for sm in rm.get("scopeMetrics", []) if sm.get("metrics")]
        for sm in rm["scopeMetrics"]:
            for metric in sm["metrics"]:
                for kind in ("histogram", "exponentialHistogram"):
                    for point in metric.get(kind, {}).get("dataPoints", []):
                        # An empty histogram's min and max are the SDK's +/-inf placeholders, not
                        # measurements.
                        if not int(point.get("count", 0)):
                            point.pop("min", None)
                            point.pop("max", None)
        if rm["scopeMetrics"]:
            resource_metrics.append(rm)
    return {"resourceMetrics": resource_metrics}


def _otlp_json(message: Message) -> dict[str, Any]:
    return _hex_ids(MessageToDict(message, use_integers_for_enums=True))


def _hex_ids[T](value: T) -> T:
    """``value`` with every id in it (bytes in base64, as the protobuf JSON mapping writes them) in hex."""
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = base64.b64decode(item).hex() if key in _IDS else _hex_ids(item)
    elif isinstance(value, list):
        for item in value:
            _hex_ids(item)
    return value


# ---- reading ---------------------------------------------------------------------------------------
class SpanLink(NamedTuple):
    """A link from a span to another span (of any trace)."""

    trace_id: str
    span_id: str
    attributes: Mapping[str, AttributeValue]


@dataclass(frozen=True)
class SpanRecord:
    """One span read back from a span file."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKindName
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue]
    links: tuple[SpanLink, ...]
    status_code: StatusName
    status_message: str | None
    resource: Mapping[str, AttributeValue]
    scope: str

    @property
    def duration_ns(self) -> int:
        """How long the span lasted."""
        return self.end_ns - self.start_ns

    @property
    def service_name(self) -> str | None:
        """The resource's ``service.name``."""
        value = self.resource.get(SERVICE_NAME)
        return value if isinstance(value, str) else None

    @property
    def service_instance_id(self) -> str | None:
        """The resource's ``service.instance.id``: which process recorded the span."""
        value = self.resource.get(SERVICE_INSTANCE_ID)
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class MetricPoint:
    """One data point read back from a metric file.

    ``value`` is set for sums and gauges; ``count``, ``sum``, ``min`` and ``max`` for histograms (``min``
    and ``max`` may be absent). ``temporality`` is OTLP's number (1 delta, 2 cumulative), None for gauges.
    """

    name: str
    unit: str
    kind: MetricKind
    attributes: Mapping[str, AttributeValue]
    start_ns: int | None
    time_ns: int
    resource: Mapping[str, AttributeValue]
    value: int | float | None = None
    count: int | None = None
    sum: float | None = None
    min: float | None = None
    max: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    monotonic: bool | None = None
    temporality: int | None = None

    @property
    def service_instance_id(self) -> str | None:
        """The resource's ``service.instance.id``: which process measured the point."""
        value = self.resource.get(SERVICE_INSTANCE_ID)
        return value if isinstance(value, str) else None


def read_spans(path: Path) -> list[SpanRecord]:
    """Every span in the span file at ``path``, in file order (a missing file raises FileNotFoundError)."""
    spans: list[SpanRecord] = []
    for document in _documents(path):
        for rs in _list(document.get("resourceSpans")):
            resource = _decode_attributes(_dict(rs.get("resource")).get("attributes"))
            for ss in _list(rs.get("scopeSpans")):
                scope = str(_dict(ss.get("scope")).get("name", ""))
                spans.extend(_decode_span(s, resource, scope) for s in _list(ss.get("spans")))
    return spans


def read_metric_points(path: Path) -> list[MetricPoint]:
    """Every data point in the metric file at ``path``, in file order (a missing file raises)."""
    points: list[MetricPoint] = []
    for document in _documents(path):
        for rm in _list(document.get("resourceMetrics")):
            resource = _decode_attributes(_dict(rm.get("resource")).get("attributes"))
            for sm in _list(rm.get("scopeMetrics")):
                for metric in _list(sm.get("metrics")):
                    points.extend(_decode_metric(metric, resource))
    return points


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON object on each line; a torn last line is skipped quietly, any other bad one with a warning."""
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except ValueError:
                # A line without its newline is still being written (or its writer died): not an error.
                if line.endswith(b"\n"):
                    log.warning("%s:%d: not JSON, skipped", path, number)
                continue
            if isinstance(document, dict):
                yield document
            else:
                log.warning("%s:%d: not a JSON object, skipped", path, number)


def _decode_span(span: dict[str, Any], resource: Mapping[str, AttributeValue], scope: str) -> SpanRecord:
    status = _dict(span.get("status"))
    message = status.get("message")
    return SpanRecord(
        trace_id=str(span.get("traceId", "")).lower(),
        span_id=str(span.get("spanId", "")).lower(),
        # The protobuf JSON mapping may also write an absent parent as "".
        parent_span_id=str(span["parentSpanId"]).lower() if span.get("parentSpanId") else None,
        name=str(span.get("name", "")),
        kind=_KIND_NAMES.get(_int(span.get("kind")), "internal"),
        start_ns=_int(span.get("startTimeUnixNano")),
        end_ns=_int(span.get("endTimeUnixNano")),
        attributes=_decode_attributes(span.get("attributes")),
        links=tuple(
            SpanLink(
                trace_id=str(link.get("traceId", "")).lower(),
                span_id=str(link.get("spanId", "")).lower(),
                attributes=_decode_attributes(link.get("attributes")),
            )
            for link in _list(span.get("links"))
        ),
        status_code=_STATUS_NAMES.get(_int(status.get("code")), "unset"),
        status_message=str(message) if message else None,
        resource=resource,
        scope=scope,
    )


def _decode_metric(metric: dict[str, Any], resource: Mapping[str, AttributeValue]) -> Iterator[MetricPoint]:
    name = str(metric.get("name", ""))
    unit = str(metric.get("unit", ""))
    for kind, key in (
        ("sum", "sum"),
        ("gauge", "gauge"),
        ("histogram", "histogram"),
        ("exponential_histogram", "exponentialHistogram"),
    ):
        if key not in metric:
            continue
        data = _dict(metric[key])
        temporality = _int(data.get("aggregationTemporality")) if kind != "gauge" else None
        monotonic = bool(data.get("isMonotonic", False)) if kind == "sum" else None
        for point in _list(data.get("dataPoints")):
            common: dict[str, Any] = {
                "name": name,
                "unit": unit,
                "kind": kind,
                "attributes": _decode_attributes(point.get("attributes")),
                "start_ns": _int(point["startTimeUnixNano"]) if point.get("startTimeUnixNano") else None,
                "time_ns": _int(point.get("timeUnixNano")),
                "resource": resource,
                "temporality": temporality,
                "monotonic": monotonic,
            }
            if kind in ("sum", "gauge"):
                value: int | float | None = (
                    _int(point["asInt"])
                    if "asInt" in point
                    else _float(point["asDouble"])
                    if "asDouble" in point
                    else None
                )
                yield MetricPoint(**common, value=value)
            else:
                yield MetricPoint(
                    **common,
                    count=_int(point.get("count")),
                    sum=_float(point["sum"]) if "sum" in point else None,
                    min=_float(point["min"]) if "min" in point else None,
                    max=_float(point["max"]) if "max" in point else None,
                    bucket_counts=tuple(_int(c) for c in _list(point.get("bucketCounts"))),
                    explicit_bounds=tuple(_float(b) for b in _list(point.get("explicitBounds"))),
                )


def _decode_attributes(attributes: object) -> dict[str, AttributeValue]:
    return {str(a.get("key", "")): _decode_value(a.get("value")) for a in _list(attributes)}


def _decode_value(value: object) -> AttributeValue:
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _int(value["intValue"])
    if "doubleValue" in value:
        return _float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_decode_value(v) for v in _list(_dict(value["arrayValue"]).get("values")))
    if "kvlistValue" in value:
        pairs = _list(_dict(value["kvlistValue"]).get("values"))
        return tuple((str(kv.get("key", "")), _decode_value(kv.get("value"))) for kv in pairs)
    if "bytesValue" in value:
        return base64.b64decode(str(value["bytesValue"]))
    return None


def _int(value: object) -> int:
    # 64-bit integers are strings in OTLP/JSON; small ones may come as numbers from other writers.
    if value is None or value == "":
        return 0
    return int(value) if isinstance(value, (int, str)) else int(str(value))


def _float(value: object) -> float:
    # Also parses "NaN", "Infinity" and "-Infinity", which is how OTLP/JSON writes them.
    return float(value) if isinstance(value, (int, float, str)) else math.nan


def _list(value: object) -> list[dict[str, Any]]:
    return value if isinstance(value, list) else []


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---- totals ----------------------------------------------------------------------------------------
type MetricKey = tuple[str, frozenset[tuple[str, AttributeValue]]]


def metric_key(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> MetricKey:
    """The key of a series in :func:`metric_totals`: its name and its attribute set."""
    return name, frozenset((attributes or {}).items())


@dataclass(frozen=True)
class MetricTotal:
    """One series (a metric name and an attribute set) totalled over every process that reported it.

    Sums: ``value`` is the sum of each process's latest point. Gauges: ``value`` is the latest point of
    any process. Histograms: ``count`` and ``sum`` are summed over processes, ``min`` and ``max`` taken
    over them. ``processes`` counts the processes (``service.instance.id``) that reported the series;
    ``time_ns`` is the latest point's time.
    """

    name: str
    unit: str
    kind: MetricKind
    attributes: Mapping[str, AttributeValue]
    processes: int
    time_ns: int
    value: int | float | None = None
    count: int | None = None
    sum: float | None = None
    min: float | None = None
    max: float | None = None

    @property
    def mean(self) -> float | None:
        """A histogram's mean (sum / count), None when it counted nothing."""
        return self.sum / self.count if self.count and self.sum is not None else None


def metric_totals(path: Path) -> dict[MetricKey, MetricTotal]:
    """Each series in the metric file at ``path``, totalled over processes (see :class:`MetricTotal`).

    A cumulative series counts each process's latest point only, as that point holds the process's
    total; a delta series (another writer's) adds every point up. Points whose resource has no
    ``service.instance.id`` count as one process.
    """
    # (series, process) -> the process's latest point (or, for delta points, their running total)
    latest: dict[tuple[MetricKey, str | None], MetricPoint] = {}
    for point in read_metric_points(path):
        index = (metric_key(point.name, point.attributes), point.service_instance_id)
        previous = latest.get(index)
        if previous is not None and point.temporality == _DELTA:
            latest[index] = _add_delta(previous, point)
        elif previous is None or point.time_ns >= previous.time_ns:  # equal times: the later line wins
            latest[index] = point
    by_series: dict[MetricKey, list[MetricPoint]] = {}
    for (key, _), point in latest.items():
        by_series.setdefault(key, []).append(point)
    return {key: _total(points) for key, points in by_series.items()}


def _add_delta(total: MetricPoint, point: MetricPoint) -> MetricPoint:
    value = total.value if point.value is None else (total.value or 0) + point.value
    count = total.count if point.count is None else (total.count or 0) + point.count
    summed = total.sum if point.sum is None else (total.sum or 0.0) + point.sum
    return replace(
        total,
        time_ns=max(total.time_ns, point.time_ns),
        value=value,
        count=count,
        sum=summed,
        min=_extreme(min, [total.min, point.min]),
        max=_extreme(max, [total.max, point.max]),
    )


def _total(points: list[MetricPoint]) -> MetricTotal:
    newest = max(points, key=lambda p: p.time_ns)
    common: dict[str, Any] = {
        "name": newest.name,
        "unit": newest.unit,
        "kind": newest.kind,
        "attributes": newest.attributes,
        "processes": len(points),
        "time_ns": newest.time_ns,
    }
    if newest.kind == "gauge":
        return MetricTotal(**common, value=newest.value)
    if newest.kind == "sum":
        value: int | float = 0
        for p in points:
            value += p.value or 0
        return MetricTotal(**common, value=value)
    counted = [p for p in points if p.count]
    return MetricTotal(
        **common,
        count=sum(p.count or 0 for p in points),
        sum=math.fsum(p.sum or 0.0 for p in points),
        min=_extreme(min, [p.min for p in counted]),
        max=_extreme(max, [p.max for p in counted]),
    )


def _extreme(pick: Any, values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return pick(present) if present else None
