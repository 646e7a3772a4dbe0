"""``devhost.workbook_preview``: every query item of the workbook has its local equivalent, and the page drawn
from telemetry the real OpenTelemetry SDK wrote through the devhost's exporters shows each panel's title and
the figures put in. No browser: the page's HTML is read back."""

from __future__ import annotations

import copy
import html
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from adapters.otlp_file import JsonLinesMetricExporter, JsonLinesSpanExporter, metrics_path, spans_path
from devhost import workbook_preview
from devhost.workbook_preview import PANELS, PreviewError, check_panels, load_workbook
from engine import metrics, telemetry, tracing
from engine.decisions import OrderEnteredError

MS = 1_000_000
ORDER = "o-1"
WORKFLOW = "wf-a"
STEP = "charge-payment"
# The worker's log format (devhost.worker.configure_logging): the events panels read these lines.
WORKER_FORMAT = "[worker 1] %(asctime)s %(levelname)s %(name)s: %(message)s"
REASON = "payment: card declined; code=51"


def query_items(workbook: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in workbook["items"] if item["type"] == workbook_preview.QUERY_ITEM]


# ---- the check ---------------------------------------------------------------------------------------------
def test_every_query_item_has_a_local_equivalent() -> None:
    workbook = load_workbook()
    check_panels(workbook)  # raises, naming each panel, otherwise
    assert {item["name"] for item in query_items(workbook)} == set(PANELS)


def test_a_query_item_without_an_equivalent_is_named() -> None:
    workbook = load_workbook()
    workbook["items"].append(
        {
            "type": 3,
            "name": "queue-sessions",
            "content": {
                "title": "Sessions per queue",
                "query": "customMetrics | where name == 'orders.queue.sessions'",
                "visualization": "timechart",
            },
        }
    )
    with pytest.raises(PreviewError, match=r"panel 'queue-sessions' \('Sessions per queue'\) has no local"):
        check_panels(workbook)


@pytest.mark.parametrize(
    ("name", "change", "complaint"),
    [
        (
            "throughput",
            lambda c: c.update(query=c["query"].replace(metrics.STATE_ENTERED, metrics.STEP_RETRIES)),
            r"panel 'throughput' .*: its query reads \['orders.step.retries'\], its local equivalent "
            r"\['orders.state.entered'\]",
        ),
        (
            "states-by-workflow",
            lambda c: c.update(visualization="timechart"),
            r"panel 'states-by-workflow' .*: visualization 'timechart', but its local equivalent yields a "
            r"Table",
        ),
        (
            "sweep-duration",
            lambda c: c.update(visualization="piechart"),
            r"panel 'sweep-duration' .*: visualization 'piechart'",
        ),
        (
            "orders-in-error",
            lambda c: c.update(query=c["query"].replace("take 100", "take 20")),
            r"panel 'orders-in-error' .*: its query changed \(digest [0-9a-f]{12}, its local equivalent was "
            r"written for [0-9a-f]{12}\)",
        ),
    ],
)
def test_a_panel_that_drifted_from_its_query_is_named(name: str, change: Any, complaint: str) -> None:
    workbook = copy.deepcopy(load_workbook())
    (item,) = [i for i in workbook["items"] if i.get("name") == name]
    change(item["content"])
    with pytest.raises(PreviewError, match=complaint):
        check_panels(workbook)


def test_an_equivalent_whose_item_is_gone_is_named() -> None:
    workbook = copy.deepcopy(load_workbook())
    workbook["items"] = [i for i in workbook["items"] if i.get("name") != "dead-letters"]
    with pytest.raises(PreviewError, match=r"panel 'dead-letters' of .*PANELS has no query item"):
        check_panels(workbook)


def test_an_item_type_the_preview_cannot_draw_is_named() -> None:
    workbook = copy.deepcopy(load_workbook())
    workbook["items"].append({"type": 10, "name": "metrics-item", "content": {}})
    with pytest.raises(PreviewError, match=r"item \d+ \('metrics-item'\): type 10"):
        check_panels(workbook)


# ---- a run's telemetry, written by the real SDK ----------------------------------------------------------
@dataclass
class Run:
    """What the fixture wrote, and what the page must show of it."""

    data_dir: Path
    order_trace: str = ""
    events: list[str] = field(default_factory=list)


def _resource(instance: str) -> Resource:
    return Resource.create({"service.name": "orders", "service.instance.id": instance})


def _write_spans(data_dir: Path, start_ns: int) -> str:
    provider = TracerProvider(resource=_resource("host:1"))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(spans_path(data_dir))))
    tracer = provider.get_tracer(tracing.TRACER_NAME)
    order = {tracing.ORDER_ID: ORDER, tracing.WORKFLOW: WORKFLOW}
    root = tracer.start_span(tracing.ORDER_SUBMIT, start_time=start_ns, attributes=order)
    under_root = trace.set_span_in_context(root)
    # Three calls of one step, 100, 200 and 300 ms, the last failed; the first with two HTTP tries.
    for index, ms in enumerate((100, 200, 300)):
        begin = start_ns + (1000 + index * 1000) * MS
        call = tracer.start_span(
            tracing.AGENT_CALL,
            context=under_root,
            kind=SpanKind.CONSUMER,
            start_time=begin,
            attributes={**order, tracing.STEP: STEP, tracing.SERVICE: "payment"},
        )
        if index == 0:
            for offset, took in ((0, 50), (60, 80)):
                attempt = tracer.start_span(
                    tracing.HTTP_CALL,
                    context=trace.set_span_in_context(call),
                    kind=SpanKind.CLIENT,
                    start_time=begin + offset * MS,
                    attributes={tracing.SERVICE: "payment", "http.request.method": "POST"},
                )
                attempt.end(end_time=begin + (offset + took) * MS)
        if index == 2:
            call.set_status(Status(StatusCode.ERROR, "payment: card declined"))
        call.end(end_time=begin + ms * MS)
    root.end(end_time=start_ns + 5000 * MS)
    sweep = tracer.start_span(tracing.SUPERVISOR_SWEEP, start_time=start_ns + 6000 * MS)
    sweep.end(end_time=start_ns + 6100 * MS)
    provider.shutdown()
    return f"{root.get_span_context().trace_id:032x}"


def _write_metrics(data_dir: Path) -> None:
    """Two processes' cumulative points, written at each flush."""
    providers = {
        instance: MeterProvider(
            resource=_resource(instance),
            metric_readers=[
                PeriodicExportingMetricReader(
                    JsonLinesMetricExporter(metrics_path(data_dir)), export_interval_millis=math.inf
                )
            ],
        )
        for instance in ("host:1", "host:2")
    }
    one, two = (providers[i].get_meter(metrics.METER_NAME) for i in ("host:1", "host:2"))
    for meter, processed in ((one, (4, 3)), (two, (4, 0))):  # 11 Processed in all, over two writes each
        entered = meter.create_counter(metrics.STATE_ENTERED, "{order}")
        retries = meter.create_counter(metrics.STEP_RETRIES, "{retry}")
        for first_write, count in enumerate(processed):
            entered.add(count, {"workflow.name": WORKFLOW, "state": "Processed"})
            if meter is one and first_write == 0:
                entered.add(2, {"workflow.name": WORKFLOW, "state": "Error"})
                retries.add(3, {"workflow.name": WORKFLOW, "step.name": STEP, "by": "agent"})
            if meter is two:
                retries.add(1, {"workflow.name": WORKFLOW, "step.name": STEP, "by": "supervisor"})
            providers["host:1" if meter is one else "host:2"].force_flush()
    one.create_counter(metrics.STEP_COMPENSATIONS, "{step}").add(
        2, {"workflow.name": WORKFLOW, "step.name": "reserve-inventory"}
    )
    duration = one.create_histogram(metrics.STEP_DURATION, "s")
    for seconds in (1.5, 2.5):
        duration.record(seconds, {"workflow.name": WORKFLOW, "step.name": STEP, "outcome": "succeeded"})
    one.create_histogram(metrics.SWEEP_DURATION, "s").record(0.25)
    one.create_gauge(metrics.BREAKER_STATE, "1").set(2, {"peer.service": "payment"})
    two.create_gauge(metrics.BREAKER_STATE, "1").set(0, {"peer.service": "payment"})
    one.create_gauge(metrics.QUEUE_MESSAGES, "{message}").set(9, {"queue": "scheduler"})
    one.create_gauge(metrics.QUEUE_AGE, "s").set(12.5, {"queue": "scheduler"})
    one.create_gauge(metrics.QUEUE_DEAD_LETTERS, "{message}").set(4, {"queue": "scheduler"})
    one.create_gauge(metrics.WAITING, "{order}").set(6, {"waiting.for": "approval"})
    for provider in providers.values():
        provider.force_flush()
        provider.shutdown()


def _write_events(data_dir: Path) -> None:
    """An order entering Error and a poison message, logged as a worker logs them."""
    log_file = data_dir / "logs" / "worker-1.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter(WORKER_FORMAT))
    telemetry.log.addHandler(handler)
    try:
        alert = OrderEnteredError(order_id=ORDER, failure_count=3, phase="do", step=STEP, reason=REASON)
        telemetry.emit_event(alert.name, **alert.fields())
        telemetry.emit_event(
            telemetry.POISON_MESSAGE, queue="scheduler", messageId="m-7", deliveryCount=1, reason="(body): x"
        )
    finally:
        telemetry.log.removeHandler(handler)
        handler.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    data_dir = tmp_path / "data"
    # The spans a little before now: the metric points carry the time they are written.
    trace_id = _write_spans(data_dir, time.time_ns() - 20_000 * MS)
    _write_metrics(data_dir)
    _write_events(data_dir)
    yield Run(data_dir, trace_id)


# ---- reading the page back -------------------------------------------------------------------------------
@dataclass
class Panel:
    rows: list[list[str]] = field(default_factory=list)
    series: dict[str, list[str]] = field(default_factory=dict)  # label -> the values of its points
    text: str = ""


class PageReader(HTMLParser):
    """Each panel's table rows (header first) and chart series, by the panel's name."""

    def __init__(self) -> None:
        super().__init__()
        self.panels: dict[str, Panel] = {}
        self._panel: Panel | None = None
        self._depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._series: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("data-name"):
            self._panel = self.panels[str(found["data-name"])] = Panel()
            self._depth = 0
        if self._panel is None:
            return
        if tag == "section":
            self._depth += 1
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "g" and found.get("data-series") is not None:
            self._series = str(found["data-series"])
            self._panel.series[self._series] = []
        elif tag == "circle" and self._series is not None:
            self._panel.series[self._series].append(str(found["data-value"]))

    def handle_endtag(self, tag: str) -> None:
        if self._panel is None:
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._panel.rows.append(self._row)
            self._row = None
        elif tag == "g":
            self._series = None
        elif tag == "section":
            self._depth -= 1
            if self._depth == 0:
                self._panel = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._panel is not None:
            self._panel.text += data


def read_page(text: str) -> dict[str, Panel]:
    reader = PageReader()
    reader.feed(text)
    return reader.panels


def table(panel: Panel) -> list[dict[str, str]]:
    header, *rows = panel.rows
    return [dict(zip(header, row, strict=True)) for row in rows]


# ---- the page --------------------------------------------------------------------------------------------
def test_the_page_shows_every_panel_with_the_figures_put_in(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "page" / "workbook.html"
    code = workbook_preview.main(["--data-dir", str(run.data_dir), "--out", str(out), "--order-id", ORDER])
    assert code == 0
    page = out.read_text()
    workbook = load_workbook()
    panels = read_page(page)

    for item in query_items(workbook):
        assert html.escape(item["content"]["title"]) in page, item["name"]
        assert item["name"] in panels, item["name"]
    assert "Local preview" in page
    assert "per 10 s here (5 minutes in Azure)" in page
    assert (
        f"Drawn locally from {run.data_dir}'s telemetry by devhost.workbook_preview; in Azure the same "
        "panels query Application Insights (infra/app/workbook.json)." in html.unescape(page)
    )
    assert "<script src" not in page and "http://" not in page and "https://" not in page  # self-contained

    # Counters: totals over both processes, and their increases per bin.
    assert table(panels["states-by-workflow"]) == [{"workflow": WORKFLOW, "Processed": "11", "Error": "2"}]
    throughput = panels["throughput"].series
    assert set(throughput) == {"Processed", "Error"}
    assert sum(int(v) for v in throughput["Processed"]) == 11
    assert panels["errors-over-time"].series.keys() == {"Error"}
    assert table(panels["retries-by-step"]) == [{"step_name": STEP, "agent": "3", "supervisor": "2"}]
    assert sum(int(v) for v in panels["retries-over-time"].series["supervisor"]) == 2
    assert table(panels["compensations"]) == [
        {"workflow": WORKFLOW, "step_name": "reserve-inventory", "undone": "2"}
    ]
    # Histograms.
    assert table(panels["step-duration"]) == [
        {"step_name": STEP, "outcome": "succeeded", "attempts": "2", "avg_s": "2", "max_s": "2.5"}
    ]
    assert panels["sweep-duration"].series == {"avg_s": ["0.25"], "max_s": ["0.25"]}
    # Spans: percentiles of the three calls, and the HTTP tries under the first.
    assert table(panels["step-latency"]) == [
        {"step_name": STEP, "calls": "3", "failed": "1", "p50_ms": "200", "p95_ms": "300"}
    ]
    assert sorted(panels["step-latency-over-time"].series) == [STEP]
    assert table(panels["remote-calls"]) == [
        {"service": "payment", "step_name": STEP, "tries": "2", "failed": "0", "p50_ms": "50", "p95_ms": "80"}
    ]
    [trace_row] = table(panels["order-trace"])
    assert trace_row["operation_Id"] == run.order_trace
    assert trace_row["spans"] == "4"  # the submission and the three calls (HTTP tries carry no order id)
    assert trace_row["failed"] == "1"
    # Gauges: the latest per key; a breaker open on one process of two.
    [breaker] = table(panels["breakers-now"])
    assert (breaker["service"], breaker["state"], breaker["open_on"], breaker["instances"]) == (
        "payment",
        "open",
        "1",
        "2",
    )
    breakers = panels["breakers-over-time"].series  # the worst per bin (the two writes may fall in two)
    assert breakers.keys() == {"payment"} and "2" in breakers["payment"]
    assert panels["queue-messages"].series == {"scheduler": ["9"]}
    assert panels["queue-age"].series == {"scheduler": ["12.5"]}
    assert [(r["queue"], r["dead_letters"]) for r in table(panels["dead-letters"])] == [("scheduler", "4")]
    assert [(r["waiting_for"], r["orders"]) for r in table(panels["waiting-now"])] == [("approval", "6")]
    assert panels["waiting-over-time"].series == {"approval": ["6"]}
    # Events, from the workers' logs; the reason whole, though it has an "=" in it.
    [error] = table(panels["orders-in-error"])
    assert (error["orderId"], error["step_name"], error["phase"], error["failures"], error["reason"]) == (
        ORDER,
        STEP,
        "do",
        "3",
        REASON,
    )
    assert error["operation_Id"] == run.order_trace
    [poison] = table(panels["poison-messages"])
    assert (poison["queue"], poison["messageId"], poison["deliveries"], poison["reason"]) == (
        "scheduler",
        "m-7",
        "1",
        "(body): x",
    )


def test_an_empty_panel_says_what_the_run_did_not_record(run: Run, tmp_path: Path) -> None:
    (run.data_dir / "logs" / "worker-1.log").unlink()
    out = tmp_path / "workbook.html"
    assert workbook_preview.main(["--data-dir", str(run.data_dir), "--out", str(out)]) == 0
    panels = read_page(out.read_text())
    assert "The query returned no results." in panels["poison-messages"].text
    assert f"This run recorded no {telemetry.POISON_MESSAGE}." in panels["poison-messages"].text
    # Without --order-id the preview picks the order with the most spans, and says so.
    assert ORDER in out.read_text() and "picked by the preview" in out.read_text()


def test_a_table_panel_drawn_as_bars_or_tiles(run: Run) -> None:
    workbook = copy.deepcopy(load_workbook())
    for item in workbook["items"]:
        if item.get("name") == "compensations":
            item["content"]["visualization"] = "barchart"
        if item.get("name") == "dead-letters":
            item["content"]["visualization"] = "tiles"
    data = workbook_preview.Telemetry.load(run.data_dir)
    page = workbook_preview.render(workbook, data, workbook_preview.make_view(data, None, None))
    assert 'class="bars"' in page and 'class="tiles"' in page


def test_a_folder_without_telemetry_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert workbook_preview.main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 1
    assert "no telemetry in" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
