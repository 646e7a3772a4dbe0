"""Fixed spans and metrics that fill every field the OTLP/JSON-lines files hold (test_otlp_format.py).

Built by hand, not by a provider: ids, times and values stay the same on every run, so what a writer makes
of them can be stored and compared (tests/adapters/otlp_1_0_0/ holds what release 1.0.0's writer made).
"""

from __future__ import annotations

import math

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000
CUMULATIVE = AggregationTemporality.CUMULATIVE
DELTA = AggregationTemporality.DELTA

RESOURCE = Resource(
    {"service.name": "orders", "service.instance.id": "host:1:0a1b2c3d", "process.pid": 41},
    schema_url="https://opentelemetry.io/schemas/1.21.0",
)
OTHER = Resource({"service.name": "orders", "service.instance.id": "host:2:4e5f6a7b"})
BARE_RESOURCE = Resource({})
ENGINE = InstrumentationScope(
    "engine", "1.1.0", "https://opentelemetry.io/schemas/1.21.0", {"scope.kind": "x"}
)
PLAIN = InstrumentationScope("devhost")
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
OTHER_TRACE = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF


def _context(
    trace_id: int, span_id: int, remote: bool = False, state: TraceState | None = None
) -> SpanContext:
    return SpanContext(trace_id, span_id, remote, TraceFlags(TraceFlags.SAMPLED), state)


def spans() -> list[ReadableSpan]:
    """Every span kind and status, every attribute type, events, links, a remote parent, two resources."""
    root = _context(TRACE, 0x00F067AA0BA902B7)
    return [
        ReadableSpan(
            "order.submit",
            context=root,
            resource=RESOURCE,
            attributes={
                "order.id": "o-1",
                "workflow.version": 3,
                "step.compensating": False,
                "ratio": 0.25,
                "big": 2**62,
                "negative": -5,
                "tags": ("a", "b"),
                "counts": (1, 2),
                "ratios": (0.5, 1.0),
                "flags": (True, False),
                "empty": (),
                "raw": b"\x00\xffid",
                "nan": math.nan,
                "inf": -math.inf,
                "unicode": "ordre n\u00b0 \u00e9t\u00e9 \u2713",
            },
            events=(
                Event("retry", {"attempt": 2, "reason": "timeout"}, T0 + MS),
                Event("no attributes", None, T0 + 2 * MS),
            ),
            links=(
                Link(_context(OTHER_TRACE, 0x1, remote=True), {"link.reason": "recovery"}),
                Link(_context(TRACE, 0xFFFFFFFFFFFFFFFF)),
            ),
            kind=SpanKind.SERVER,
            status=Status(StatusCode.UNSET),
            start_time=T0,
            end_time=T0 + 20 * MS,
            instrumentation_scope=ENGINE,
        ),
        ReadableSpan(
            "http.call",
            context=_context(TRACE, 0x2),
            parent=root,
            resource=RESOURCE,
            attributes={"http.response.status_code": 503},
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.ERROR, "HTTP 503"),
            start_time=T0 + MS,
            end_time=T0 + 5 * MS,
            instrumentation_scope=ENGINE,
        ),
        ReadableSpan(
            "queue.receive",
            context=_context(TRACE, 0x3, state=TraceState([("vendor", "v1")])),
            parent=_context(TRACE, 0x2, remote=True),
            resource=RESOURCE,
            kind=SpanKind.CONSUMER,
            status=Status(StatusCode.OK),
            start_time=T0 + 6 * MS,
            end_time=T0 + 6 * MS,
            instrumentation_scope=PLAIN,
        ),
        ReadableSpan(
            "",
            context=_context(TRACE, 0x4),
            parent=root,
            resource=RESOURCE,
            kind=SpanKind.INTERNAL,
            start_time=T0 + 7 * MS,
            end_time=T0 + 8 * MS,
            instrumentation_scope=PLAIN,
        ),
        ReadableSpan(
            "queue.send",
            context=_context(OTHER_TRACE, 0x5),
            resource=OTHER,
            attributes={"queue": "orders"},
            kind=SpanKind.PRODUCER,
            status=Status(StatusCode.OK),
            start_time=T0,
            end_time=T0 + MS,
            instrumentation_scope=ENGINE,
        ),
        ReadableSpan(
            "no scope",
            context=_context(OTHER_TRACE, 0x6),
            resource=BARE_RESOURCE,
            start_time=T0,
            end_time=T0 + MS,
        ),
    ]


def metrics() -> MetricsData:
    """Every data type, int and double values, zeros, an exemplar, an empty histogram, two resources."""
    pending = {"state": "Pending"}
    exemplar = Exemplar({"order.id": "o-1"}, 0.5, T0 + 3, span_id=0x2, trace_id=TRACE)
    bare = Exemplar({}, 0, T0 + 4)
    engine = [
        Metric(
            "orders.state.entered",
            "Orders that entered a state",
            "{order}",
            Sum(
                [
                    NumberDataPoint(pending, T0, T0 + 5 * MS, 5, exemplars=[exemplar]),
                    NumberDataPoint({}, T0, T0 + 5 * MS, 0),
                ],
                CUMULATIVE,
                True,
            ),
        ),
        Metric(
            "orders.inflight",
            "",
            "",
            Sum([NumberDataPoint(pending, T0, T0 + 5 * MS, -2.5)], CUMULATIVE, False),
        ),
        Metric(
            "orders.queue.messages",
            "",
            "{message}",
            Gauge(
                [  # no start time: None, as the SDK's gauges have
                    NumberDataPoint({"queue": "a"}, None, T0 + 5 * MS, 1.5, exemplars=[exemplar]),
                    NumberDataPoint({"queue": "b"}, None, T0 + 5 * MS, 4),
                    NumberDataPoint({"queue": "c"}, None, T0 + 5 * MS, 0.0),
                    NumberDataPoint({"queue": "d"}, None, T0 + 5 * MS, math.inf),
                ]
            ),
        ),
        Metric(
            "orders.step.duration",
            "How long a step took",
            "s",
            Histogram(
                [
                    HistogramDataPoint(
                        {"step.name": "reserve"},
                        T0,
                        T0 + 5 * MS,
                        2,
                        2.0,
                        [0, 1, 1, 0],
                        [0.0, 1.0, 5.0],
                        0.5,
                        1.5,
                        exemplars=[exemplar],
                    ),
                    HistogramDataPoint({}, T0, T0 + 5 * MS, 3, 6, [3], [], 1, 3),
                    # What the SDK hands over for a series that measured nothing: +/-inf placeholders.
                    HistogramDataPoint(
                        {"step.name": "idle"}, T0, T0 + 5 * MS, 0, 0, [0, 0], [1.0], math.inf, -math.inf
                    ),
                ],
                CUMULATIVE,
            ),
        ),
        Metric(
            "orders.payload.size",
            "",
            "By",
            ExponentialHistogram(
                [
                    # attributes, start, time, count, sum, scale, zero count, positive, negative, flags,
                    # min, max
                    ExponentialHistogramDataPoint(
                        {}, T0, T0 + MS, 3, 3.5, 20, 1, Buckets(-3, [1, 0, 1]), Buckets(0, []), 0, 0.0, 2.0
                    ),
                    # (an exemplar without a span: a measurement made outside any)
                    ExponentialHistogramDataPoint(
                        {"y": 1},
                        T0,
                        T0 + MS,
                        1,
                        0.0,
                        0,
                        1,
                        Buckets(0, []),
                        Buckets(0, []),
                        0,
                        0.0,
                        0.0,
                        [bare],
                    ),
                    ExponentialHistogramDataPoint(
                        {"x": 1}, T0, T0 + MS, 2, -1.0, 3, 0, Buckets(0, []), Buckets(2, [2]), 1, -0.5, -0.5
                    ),
                ],
                DELTA,
            ),
        ),
    ]
    devhost = [Metric("devhost.ticks", None, None, Sum([NumberDataPoint({}, T0, T0 + MS, 1)], DELTA, True))]
    other = [Metric("orders.queue.messages", "", "{message}", Gauge([NumberDataPoint({}, None, T0, 7)]))]
    return MetricsData(
        [
            ResourceMetrics(
                RESOURCE,
                [ScopeMetrics(ENGINE, engine, ENGINE.schema_url or ""), ScopeMetrics(PLAIN, devhost, "")],
                RESOURCE.schema_url,
            ),
            ResourceMetrics(OTHER, [ScopeMetrics(PLAIN, other, "")], ""),
        ]
    )
