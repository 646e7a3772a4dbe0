"""``orders-trace``: an order's span tree, read from a span file the real SDK wrote through the exporter."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from adapters.otlp_file import JsonLinesSpanExporter, spans_path
from devhost.trace_cli import main

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000
ORDER = "order.id"


@dataclass
class Recorded:
    """What the fixture wrote: the data folder and the ids a test checks against."""

    data_dir: Path
    order_trace: str
    sweep_trace: str
    sweep_span: str


def _tracer(data_dir: Path, instance: str) -> trace.Tracer:
    provider = TracerProvider(
        resource=Resource.create({"service.name": "orders", "service.instance.id": instance})
    )
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(spans_path(data_dir))))
    return provider.get_tracer("engine")


def _span(
    tracer: trace.Tracer,
    name: str,
    start_ms: float,
    end_ms: float | None,
    parent: trace.Span | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    links: list[Link] | None = None,
    error: str | None = None,
    attributes: dict[str, Any] | None = None,
) -> trace.Span:
    span = tracer.start_span(
        name,
        context=trace.set_span_in_context(parent) if parent else None,
        kind=kind,
        attributes=attributes,
        links=links,
        start_time=T0 + int(start_ms * MS),
    )
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    if end_ms is not None:  # a span never ended is never exported: "still in flight"
        span.end(end_time=T0 + int(end_ms * MS))
    return span


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """One order's trace written by two "processes", a sweep in a trace of its own, and another order."""
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(variable, raising=False)  # rich would colour piped output
    api, worker = _tracer(tmp_path, "host:1"), _tracer(tmp_path, "host:2")
    sweep = _span(worker, "supervisor.sweep", 50, 60)
    submit = _span(
        api,
        "order.submit",
        0,
        5,
        kind=SpanKind.SERVER,
        attributes={ORDER: "o-1", "workflow.name": "standard"},
    )
    command = _span(
        worker,
        "scheduler.command",
        10,
        12,
        submit,
        SpanKind.CONSUMER,
        attributes={ORDER: "o-1", "command.kind": "dispatch"},
    )
    agent = _span(
        worker,
        "agent.call",
        20,
        45,
        command,
        SpanKind.CONSUMER,
        error="HTTP 503",
        attributes={
            ORDER: "o-1",
            "step.name": "reserve",
            "step.attempt": 1,
            "peer.service": "inventory",
            "agent.outcome": "failed",
        },
    )
    # The HTTP try names no order: it belongs to the order through its parent.
    http = {"peer.service": "inventory", "http.response.status_code": 503}
    _span(worker, "http.call", 21, 40, agent, SpanKind.CLIENT, attributes=http)
    _span(
        worker,
        "supervisor.recover",
        55,
        56,
        submit,
        links=[Link(sweep.get_span_context())],
        attributes={ORDER: "o-1", "recovery.action": "retry"},
    )
    retry = _span(worker, "agent.call", 70, None, command, SpanKind.CONSUMER, attributes={ORDER: "o-1"})
    _span(worker, "http.call", 71, 80, retry, SpanKind.CLIENT, attributes={"peer.service": "inventory"})
    _span(api, "order.submit", 1, 2, kind=SpanKind.SERVER, attributes={ORDER: "o-2"})
    return Recorded(
        data_dir=tmp_path,
        order_trace=f"{submit.get_span_context().trace_id:032x}",
        sweep_trace=f"{sweep.get_span_context().trace_id:032x}",
        sweep_span=f"{sweep.get_span_context().span_id:016x}",
    )


def test_prints_the_orders_span_tree(recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["o-1", "--data-dir", str(recorded.data_dir)])

    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b[" not in out  # no colour codes when not on a terminal
    assert out.splitlines() == [
        f"trace {recorded.order_trace}  6 spans, 80.0 ms",
        "     +0.0 ms     5.0 ms  order.submit",
        "    +10.0 ms     2.0 ms    scheduler.command  command.kind=dispatch",
        "    +20.0 ms    25.0 ms      agent.call  step.name=reserve  step.attempt=1  peer.service=inventory"
        "  agent.outcome=failed  error: HTTP 503",
        "    +21.0 ms    19.0 ms        http.call  peer.service=inventory  http.response.status_code=503",
        "    +55.0 ms     1.0 ms    supervisor.recover  recovery.action=retry",
        # under the span, where a child's name would start
        " " * 29 + f"linked to supervisor.sweep (trace {recorded.sweep_trace[:8]})",
        "    +71.0 ms     9.0 ms  http.call  peer.service=inventory  (parent not recorded)",
    ]


def test_json_holds_the_same_tree(recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["o-1", "--data-dir", str(recorded.data_dir), "--json"])

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["orderId"] == "o-1"
    assert document["file"] == str(spans_path(recorded.data_dir))
    [tree] = document["traces"]
    assert (tree["traceId"], tree["spanCount"], tree["durationMs"]) == (recorded.order_trace, 6, 80.0)
    assert tree["startTimeUnixNano"] == str(T0)
    submit, orphan = tree["spans"]
    assert (submit["name"], submit["kind"], submit["parentRecorded"]) == ("order.submit", "server", True)
    assert submit["service"] == {"name": "orders", "instanceId": "host:1"}
    assert [c["name"] for c in submit["children"]] == ["scheduler.command", "supervisor.recover"]
    command, recover = submit["children"]
    [agent] = command["children"]
    assert (agent["offsetMs"], agent["durationMs"]) == (20.0, 25.0)
    assert agent["attributes"]["step.attempt"] == 1
    assert agent["status"] == {"code": "error", "message": "HTTP 503"}
    assert agent["service"]["instanceId"] == "host:2"
    assert [c["name"] for c in agent["children"]] == ["http.call"]
    assert recover["links"] == [
        {"traceId": recorded.sweep_trace, "spanId": recorded.sweep_span, "name": "supervisor.sweep"}
    ]
    assert (orphan["name"], orphan["parentRecorded"], orphan["offsetMs"]) == ("http.call", False, 71.0)
    assert orphan["parentSpanId"] is not None


def test_reads_orders_devhosts_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _span(_tracer(tmp_path / ".devhost", "host:1"), "order.submit", 0, 1, attributes={ORDER: "o-1"})
    monkeypatch.chdir(tmp_path)

    assert main(["o-1"]) == 0

    assert capsys.readouterr().out.splitlines()[1:] == ["     +0.0 ms     1.0 ms  order.submit"]


def test_a_trace_shared_by_orders_shows_only_this_orders_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tracer = _tracer(tmp_path, "host:1")
    batch = _span(tracer, "client.batch", 0, 30, kind=SpanKind.CLIENT)
    for i, order in enumerate(("o-1", "o-2")):
        # The HTTP request's span names no order; the submission under it does.
        post = _span(tracer, "POST /api/orders", 1 + 10 * i, 6 + 10 * i, batch, SpanKind.SERVER)
        submit = _span(tracer, "order.submit", 2 + 10 * i, 5 + 10 * i, post, attributes={ORDER: order})
        _span(tracer, "scheduler.command", 3 + 10 * i, 4 + 10 * i, submit, attributes={"command.kind": order})

    assert main(["o-2", "--data-dir", str(tmp_path)]) == 0

    assert capsys.readouterr().out.splitlines()[1:] == [
        "     +0.0 ms    30.0 ms  client.batch",
        "    +11.0 ms     5.0 ms    POST /api/orders",
        "    +12.0 ms     3.0 ms      order.submit",
        "    +13.0 ms     1.0 ms        scheduler.command  command.kind=o-2",
    ]


def test_a_span_of_another_trace_linking_here_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tracer = _tracer(tmp_path, "host:1")
    submit = _span(tracer, "order.submit", 0, 5, attributes={ORDER: "o-1"})
    other = _span(tracer, "console.request", 3, 4, links=[Link(submit.get_span_context())])

    assert main(["o-1", "--data-dir", str(tmp_path)]) == 0

    trace_id = f"{other.get_span_context().trace_id:032x}"
    assert capsys.readouterr().out.splitlines()[1:] == [
        "     +0.0 ms     5.0 ms  order.submit",
        " " * 27 + f"linked from console.request (trace {trace_id[:8]})",
    ]


def test_no_span_file_exits_1_saying_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["o-1", "--data-dir", str(tmp_path / "nowhere")])

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert str(spans_path(tmp_path / "nowhere")) in captured.err


def test_an_order_no_span_names_exits_1(recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["o-404", "--data-dir", str(recorded.data_dir), "--json"])

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "o-404" in captured.err
    assert str(spans_path(recorded.data_dir)) in captured.err
