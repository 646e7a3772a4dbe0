"""The OTLP/JSON-lines exporters against the real OpenTelemetry SDK, and the readers of their files."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from adapters.otlp_file import (
    JsonLinesMetricExporter,
    JsonLinesSpanExporter,
    SpanLink,
    metric_key,
    metric_totals,
    metrics_path,
    read_metric_points,
    read_spans,
    spans_path,
)

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000


def resource(instance: str) -> Resource:
    return Resource.create({"service.name": "orders", "service.instance.id": instance})


def tracer_provider(path: Path, instance: str = "host:1") -> TracerProvider:
    provider = TracerProvider(resource=resource(instance))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    return provider


@pytest.fixture
def meters(tmp_path: Path) -> Iterator[dict[str, MeterProvider]]:
    """Two "processes" writing to one metric file: two meter providers, collected only when flushed."""
    path = metrics_path(tmp_path)
    providers = {
        instance: MeterProvider(
            resource=resource(instance),
            metric_readers=[
                PeriodicExportingMetricReader(JsonLinesMetricExporter(path), export_interval_millis=math.inf)
            ],
        )
        for instance in ("host:1", "host:2")
    }
    yield providers
    for provider in providers.values():
        provider.shutdown()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def make_spans(path: Path) -> tuple[trace.Span, trace.Span]:
    """A sweep in a trace of its own; an order's root span and a child linked to the sweep."""
    tracer = tracer_provider(path).get_tracer("engine")
    sweep = tracer.start_span("supervisor.sweep", start_time=T0)
    sweep.end(end_time=T0 + 2 * MS)
    root = tracer.start_span(
        "order.submit",
        kind=SpanKind.SERVER,
        start_time=T0 + 10 * MS,
        attributes={
            "order.id": "o-1",
            "workflow.version": 3,
            "step.compensating": False,
            "ratio": 0.25,
            "big": 2**62,
            "tags": ["a", "b"],
            "counts": [1, 2],
        },
    )
    child = tracer.start_span(
        "http.call",
        context=trace.set_span_in_context(root),
        kind=SpanKind.CLIENT,
        start_time=T0 + 11 * MS,
        links=[Link(sweep.get_span_context(), {"link.reason": "recovery"})],
        attributes={"http.response.status_code": 503},
    )
    child.set_status(Status(StatusCode.ERROR, "HTTP 503"))
    child.end(end_time=T0 + 15 * MS)
    root.end(end_time=T0 + 20 * MS)
    return sweep, root


def test_each_export_is_one_otlp_json_line(tmp_path: Path) -> None:
    path = spans_path(tmp_path)
    sweep, root = make_spans(path)

    documents = lines(path)
    assert len(documents) == 3  # SimpleSpanProcessor exports each span on its own: one line each
    spans = [d["resourceSpans"][0]["scopeSpans"][0]["spans"][0] for d in documents]
    assert [s["name"] for s in spans] == ["supervisor.sweep", "http.call", "order.submit"]
    resource_attributes = {
        a["key"]: a["value"] for a in documents[0]["resourceSpans"][0]["resource"]["attributes"]
    }
    assert resource_attributes["service.instance.id"] == {"stringValue": "host:1"}
    assert documents[0]["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] == "engine"

    _, http, submit = spans
    assert re.fullmatch(r"[0-9a-f]{32}", submit["traceId"])
    assert re.fullmatch(r"[0-9a-f]{16}", submit["spanId"])
    assert submit["traceId"] == f"{root.get_span_context().trace_id:032x}"
    assert "parentSpanId" not in submit
    assert http["parentSpanId"] == submit["spanId"]
    assert (submit["kind"], http["kind"], spans[0]["kind"]) == (2, 3, 1)
    assert submit["startTimeUnixNano"] == str(T0 + 10 * MS)
    assert submit["endTimeUnixNano"] == str(T0 + 20 * MS)
    attributes = {a["key"]: a["value"] for a in submit["attributes"]}
    assert attributes["order.id"] == {"stringValue": "o-1"}
    assert attributes["workflow.version"] == {"intValue": "3"}
    assert attributes["big"] == {"intValue": str(2**62)}
    assert attributes["step.compensating"] == {"boolValue": False}
    assert attributes["ratio"] == {"doubleValue": 0.25}
    assert attributes["counts"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}
    assert submit["status"] == {}  # code 0 (unset) is the default: OTLP/JSON leaves it out
    assert http["status"] == {"code": 2, "message": "HTTP 503"}
    assert http["links"] == [
        {
            "traceId": f"{sweep.get_span_context().trace_id:032x}",
            "spanId": f"{sweep.get_span_context().span_id:016x}",
            "attributes": [{"key": "link.reason", "value": {"stringValue": "recovery"}}],
            "flags": 0x100,  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK: the sweep's context is a local one
        }
    ]


def test_spans_read_back(tmp_path: Path) -> None:
    path = spans_path(tmp_path)
    _, root = make_spans(path)

    records = {r.name: r for r in read_spans(path)}
    assert set(records) == {"supervisor.sweep", "order.submit", "http.call"}
    submit, http = records["order.submit"], records["http.call"]
    assert submit.trace_id == f"{root.get_span_context().trace_id:032x}"
    assert submit.parent_span_id is None
    assert http.parent_span_id == submit.span_id
    assert (submit.kind, http.kind, records["supervisor.sweep"].kind) == ("server", "client", "internal")
    assert (submit.start_ns, submit.end_ns, submit.duration_ns) == (T0 + 10 * MS, T0 + 20 * MS, 10 * MS)
    assert submit.attributes == {
        "order.id": "o-1",
        "workflow.version": 3,
        "step.compensating": False,
        "ratio": 0.25,
        "big": 2**62,
        "tags": ("a", "b"),
        "counts": (1, 2),
    }
    assert type(submit.attributes["workflow.version"]) is int
    assert http.links == (
        SpanLink(
            trace_id=records["supervisor.sweep"].trace_id,
            span_id=records["supervisor.sweep"].span_id,
            attributes={"link.reason": "recovery"},
        ),
    )
    assert http.links[0].trace_id != http.trace_id
    assert (http.status_code, http.status_message) == ("error", "HTTP 503")
    assert (submit.status_code, submit.status_message) == ("unset", None)
    assert (submit.service_name, submit.service_instance_id, submit.scope) == ("orders", "host:1", "engine")


def test_one_export_groups_spans_by_resource_and_scope(tmp_path: Path) -> None:
    memory = InMemorySpanExporter()
    for instance in ("host:1", "host:2"):
        provider = TracerProvider(resource=resource(instance))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        for scope in ("engine", "other"):
            provider.get_tracer(scope).start_span(f"{instance}/{scope}").end()
    captured: tuple[ReadableSpan, ...] = memory.get_finished_spans()
    path = tmp_path / "spans.jsonl"

    assert JsonLinesSpanExporter(path).export(captured) is SpanExportResult.SUCCESS

    [document] = lines(path)
    grouped = [
        [[s["name"] for s in ss["spans"]] for ss in rs["scopeSpans"]] for rs in document["resourceSpans"]
    ]
    assert grouped == [[["host:1/engine"], ["host:1/other"]], [["host:2/engine"], ["host:2/other"]]]
    assert [ss["scope"]["name"] for ss in document["resourceSpans"][1]["scopeSpans"]] == ["engine", "other"]


def test_metric_lines_are_cumulative_otlp_json(tmp_path: Path, meters: dict[str, MeterProvider]) -> None:
    meter = meters["host:1"].get_meter("engine")
    entered = meter.create_counter("orders.state.entered", "{order}")
    duration = meter.create_histogram("orders.step.duration", "s")
    queued = meter.create_gauge("orders.queue.messages", "{message}")
    entered.add(2, {"state": "Pending"})
    duration.record(0.5, {"step.name": "reserve"})
    queued.set(4, {"queue": "q"})
    meters["host:1"].force_flush()
    entered.add(3, {"state": "Pending"})
    duration.record(1.5, {"step.name": "reserve"})
    queued.set(1.5, {"queue": "q"})
    meters["host:1"].force_flush()

    documents = lines(metrics_path(tmp_path))
    assert len(documents) == 2  # one line per collection
    [scope_metrics] = documents[1]["resourceMetrics"][0]["scopeMetrics"]
    assert scope_metrics["scope"]["name"] == "engine"
    by_name = {m["name"]: m for m in scope_metrics["metrics"]}
    counter = by_name["orders.state.entered"]
    assert counter["unit"] == "{order}"
    assert counter["sum"]["aggregationTemporality"] == 2 and counter["sum"]["isMonotonic"] is True
    [point] = counter["sum"]["dataPoints"]
    assert point["asInt"] == "5"  # cumulative: 2 + 3, not the 3 of this interval
    assert point["attributes"] == [{"key": "state", "value": {"stringValue": "Pending"}}]
    assert int(point["timeUnixNano"]) >= int(point["startTimeUnixNano"]) > 0
    histogram = by_name["orders.step.duration"]["histogram"]
    assert histogram["aggregationTemporality"] == 2
    [point] = histogram["dataPoints"]
    assert (point["count"], point["sum"], point["min"], point["max"]) == ("2", 2.0, 0.5, 1.5)
    assert all(isinstance(c, str) for c in point["bucketCounts"])
    assert sum(int(c) for c in point["bucketCounts"]) == 2
    assert len(point["bucketCounts"]) == len(point["explicitBounds"]) + 1
    [point] = by_name["orders.queue.messages"]["gauge"]["dataPoints"]
    assert point["asDouble"] == 1.5

    points = [p for p in read_metric_points(metrics_path(tmp_path)) if p.name == "orders.state.entered"]
    assert [(p.value, p.kind, p.monotonic, p.temporality) for p in points] == [
        (2, "sum", True, 2),
        (5, "sum", True, 2),
    ]
    assert points[0].service_instance_id == "host:1"
    assert points[0].attributes == {"state": "Pending"}


def test_metric_totals_add_each_processes_latest_point(
    tmp_path: Path, meters: dict[str, MeterProvider]
) -> None:
    one, two = (meters[i].get_meter("engine") for i in ("host:1", "host:2"))
    for meter, adds, durations in ((one, [2, 3], [0.5, 4.0]), (two, [7, 1], [2.0, 1.0])):
        entered = meter.create_counter("orders.state.entered", "{order}")
        duration = meter.create_histogram("orders.step.duration", "s")
        for add, seconds in zip(adds, durations, strict=True):
            entered.add(add, {"state": "Pending"})
            duration.record(seconds, {"step.name": "reserve"})
            # Each collection writes a line: the earlier, smaller totals must not be counted again.
            meters["host:1" if meter is one else "host:2"].force_flush()
    one.create_counter("orders.state.entered", "{order}").add(1, {"state": "Processed"})
    meters["host:1"].force_flush()

    totals = metric_totals(metrics_path(tmp_path))

    pending = totals[metric_key("orders.state.entered", {"state": "Pending"})]
    assert (pending.value, pending.processes, pending.kind) == (13, 2, "sum")  # (2 + 3) + (7 + 1)
    processed = totals[metric_key("orders.state.entered", {"state": "Processed"})]
    assert (processed.value, processed.processes) == (1, 1)
    reserve = totals[metric_key("orders.step.duration", {"step.name": "reserve"})]
    assert (reserve.kind, reserve.count, reserve.sum, reserve.min, reserve.max) == (
        "histogram",
        4,
        7.5,
        0.5,
        4.0,
    )
    assert reserve.mean == pytest.approx(7.5 / 4)
    assert reserve.unit == "s"
    assert reserve.attributes == {"step.name": "reserve"}
    assert len(totals) == 3


def _metric_line(instance: str, metrics: list[dict[str, Any]]) -> str:
    document = {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [{"key": "service.instance.id", "value": {"stringValue": instance}}]
                },
                "scopeMetrics": [{"scope": {"name": "engine"}, "metrics": metrics}],
            }
        ]
    }
    return json.dumps(document) + "\n"


def _gauge(value: int, time: int) -> dict[str, Any]:
    point = {"attributes": [], "timeUnixNano": str(time), "asInt": str(value)}
    return {"name": "orders.queue.messages", "unit": "{message}", "gauge": {"dataPoints": [point]}}


def test_a_gauge_total_is_the_latest_point_by_time_not_by_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        _metric_line("host:1", [_gauge(3, T0)])
        + _metric_line("host:1", [_gauge(7, T0 + 30)])
        + _metric_line("host:2", [_gauge(9, T0 + 20)])  # written last, measured before host:1's 7
    )

    [total] = metric_totals(path).values()

    assert (total.kind, total.value, total.processes, total.time_ns) == ("gauge", 7, 2, T0 + 30)


def _sum(value: int, time: int, temporality: int) -> dict[str, Any]:
    point = {"attributes": [], "timeUnixNano": str(time), "asInt": str(value)}
    data = {"dataPoints": [point], "aggregationTemporality": temporality, "isMonotonic": True}
    return {"name": "orders.state.entered", "unit": "{order}", "sum": data}


def test_delta_points_of_another_writer_are_added_up(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        _metric_line("delta", [_sum(2, T0, temporality=1)])
        + _metric_line("cumulative", [_sum(4, T0, temporality=2)])
        + _metric_line("delta", [_sum(3, T0 + 10, temporality=1)])
        + _metric_line("cumulative", [_sum(6, T0 + 10, temporality=2)])
    )

    [total] = metric_totals(path).values()

    assert (total.value, total.processes, total.time_ns) == (2 + 3 + 6, 2, T0 + 10)


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    spans_file, metrics_file = spans_path(tmp_path), metrics_path(tmp_path)
    make_spans(spans_file)
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    metrics_file.write_text(_metric_line("host:1", [_gauge(3, T0)]))
    for path in (spans_file, metrics_file):
        whole = path.read_text().splitlines()[0]
        with path.open("a") as out:
            out.write(whole[: len(whole) // 2])  # a line still being written: no newline yet

    assert [r.name for r in read_spans(spans_file)] == ["supervisor.sweep", "http.call", "order.submit"]
    assert [p.value for p in read_metric_points(metrics_file)] == [3]
    assert [t.value for t in metric_totals(metrics_file).values()] == [3]


def test_a_broken_line_inside_the_file_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        _metric_line("host:1", [_gauge(3, T0)])
        + '{"resourceMetrics": [\n'
        + _metric_line("host:1", [_gauge(4, T0 + 1)])
    )

    with caplog.at_level(logging.WARNING, logger="adapters.otlp_file"):
        values = [p.value for p in read_metric_points(path)]

    assert values == [3, 4]
    assert [r.getMessage() for r in caplog.records] == [f"{path}:2: not JSON, skipped"]


def test_export_failures_return_failure_and_warn_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # a file where the telemetry folder would have to be
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource("host:1"))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("engine").start_span("order.submit").end()
    spans = memory.get_finished_spans()
    reader = InMemoryMetricReader()
    MeterProvider(metric_readers=[reader]).get_meter("engine").create_counter("c").add(1)
    metrics_data = reader.get_metrics_data()
    assert metrics_data is not None
    span_exporter = JsonLinesSpanExporter(spans_path(blocker))
    metric_exporter = JsonLinesMetricExporter(metrics_path(blocker))

    with caplog.at_level(logging.WARNING, logger="adapters.otlp_file"):
        span_results = [span_exporter.export(spans), span_exporter.export(spans)]
        metric_results = [metric_exporter.export(metrics_data), metric_exporter.export(metrics_data)]

    assert span_results == [SpanExportResult.FAILURE] * 2
    assert metric_results == [MetricExportResult.FAILURE] * 2
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot write spans to {spans_path(blocker)}",
        f"cannot write metrics to {metrics_path(blocker)}",
    ]
    assert blocker.read_text() == ""


def test_no_export_after_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = tracer_provider(path)
    provider.get_tracer("engine").start_span("before").end()
    exporter = JsonLinesSpanExporter(path)
    exporter.shutdown()

    assert exporter.export(()) is SpanExportResult.FAILURE
    assert exporter.force_flush() is True
    assert [r.name for r in read_spans(path)] == ["before"]


def test_concurrent_appends_keep_every_line_whole(tmp_path: Path) -> None:
    # Lines far above a pipe buffer's size, from writers with a descriptor each, as separate processes have.
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource("host:1"))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("engine")
    for i in range(200):
        tracer.start_span(f"span-{i}", attributes={"padding": "x" * 1000}).end()
    batch = memory.get_finished_spans()
    path = tmp_path / "spans.jsonl"

    def write(_: int) -> list[SpanExportResult]:
        exporter = JsonLinesSpanExporter(path)
        return [exporter.export(batch) for _ in range(10)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [r for rs in pool.map(write, range(8)) for r in rs]

    assert set(results) == {SpanExportResult.SUCCESS}
    assert len(lines(path)) == 80  # every line parses: none torn or interleaved
    assert len(read_spans(path)) == 80 * 200


def test_doubles_json_cannot_spell_are_written_as_otlp_spells_them(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    tracer_provider(path).get_tracer("engine").start_span(
        "odd", attributes={"nan": math.nan, "inf": -math.inf}
    ).end()

    [document] = lines(path)
    attributes = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    assert attributes == [
        {"key": "nan", "value": {"doubleValue": "NaN"}},
        {"key": "inf", "value": {"doubleValue": "-Infinity"}},
    ]
    [record] = read_spans(path)
    nan = record.attributes["nan"]
    assert isinstance(nan, float) and math.isnan(nan)
    assert record.attributes["inf"] == -math.inf
