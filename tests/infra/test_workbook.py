"""The operations workbook: infra/app/workbook.bicep deploys infra/app/workbook.json under the Application
Insights component, and every query in it reads names the engine emits.

Where the names land in Application Insights (azure-monitor-opentelemetry): SERVER and CONSUMER spans in
``requests``, CLIENT and INTERNAL spans in ``dependencies``, span attributes in ``customDimensions``
(except the standard ones the exporter keeps out, e.g. ``peer.*``, ``http.*``, ``messaging.*``), metrics in
``customMetrics`` under the instrument's name (histograms as count, sum, min and max), alert events in
``customEvents``. The expected names are the telemetry contract's, listed below.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter.export.trace._exporter import _is_standard_attribute
from pydantic import BaseModel

from bicep_contracts.syntax import Access, Obj, Ref, body_object, parse_file
from engine import inbound, metrics, telemetry, tracing
from engine.decisions import OrderEnteredError
from engine.state import ProcessState
from tests.infra.bicep_eval import Evaluator

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
WORKBOOK_BICEP = INFRA / "app" / "workbook.bicep"
WORKBOOK_JSON = INFRA / "app" / "workbook.json"
COMPONENT = "/subscriptions/s/resourceGroups/rg-x/providers/Microsoft.Insights/components/appi-x"

# ---- the telemetry contract ----------------------------------------------------------------------------
# The attributes and kinds each metric and span has: the contract the workbook's queries are held to (the
# names are the engine's: test_the_contract_names_what_the_engine_emits).
METRICS: dict[str, set[str]] = {
    "orders.state.entered": {"workflow.name", "state"},
    "orders.step.duration": {"workflow.name", "step.name", "outcome"},
    "orders.step.retries": {"workflow.name", "step.name", "by"},
    "orders.step.compensations": {"workflow.name", "step.name"},
    "orders.breaker.state": {"peer.service"},
    "orders.queue.messages": {"queue"},
    "orders.queue.age": {"queue"},
    "orders.queue.dead_letters": {"queue"},
    "orders.waiting": {"waiting.for"},
    "orders.supervisor.sweep.duration": set(),
}
SPAN_KINDS = {
    "order.submit": "INTERNAL",
    "scheduler.command": "CONSUMER",
    "scheduler.reply": "CONSUMER",
    "agent.call": "CONSUMER",
    "http.call": "CLIENT",
    "callback.receive": "SERVER",
    "supervisor.sweep": "INTERNAL",
    "supervisor.recover": "INTERNAL",
    "operator.action": "INTERNAL",
}
SPAN_ATTRIBUTES = {
    "order.id",
    "workflow.name",
    "workflow.version",
    "step.name",
    "step.index",
    "step.attempt",
    "step.compensating",
    "messaging.destination.name",
    "command.kind",
    "peer.service",
    "agent.action",
    "agent.outcome",
    "http.request.method",
    "url.full",
    "http.response.status_code",
    "http.request.resend_count",
    "operator.action",
    "recovery.action",
}
# The exporter names an HTTP CLIENT span's dependency "<method> <path>", so its span name is not queryable.
RENAMED_SPANS = {"http.call"}
STATES = {state.value for state in ProcessState}

TABLES = {"requests", "dependencies", "customMetrics", "customEvents", "traces"}
SPAN_TABLES = {
    "requests": {name for name, kind in SPAN_KINDS.items() if kind in ("SERVER", "CONSUMER")},
    "dependencies": {name for name, kind in SPAN_KINDS.items() if kind in ("CLIENT", "INTERNAL")},
}
VISUALIZATIONS = {"table", "timechart", "barchart", "linechart", "areachart", "piechart", "tiles"}


class _Invalid(BaseModel):
    field: int


@functools.cache
def event_fields() -> dict[str, set[str]]:
    """The properties each alert event carries, as the engine emits them."""
    order_error = OrderEnteredError(order_id="o", failure_count=1, phase="p", step="s", reason="r")
    captured: list[logging.LogRecord] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    handler = _Capture()
    telemetry.log.addHandler(handler)
    try:
        with pytest.raises(inbound.PoisonMessage):
            inbound.parse(_Invalid, b"{}", "q", "m", 1)
    finally:
        telemetry.log.removeHandler(handler)
    (poison,) = [r for r in captured if getattr(r, "microsoft.custom_event.name", None)]
    standard = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
    poison_fields = set(poison.__dict__) - standard - {"microsoft.custom_event.name"}
    return {
        telemetry.ORDER_ENTERED_ERROR: set(order_error.fields()),
        telemetry.POISON_MESSAGE: poison_fields,
        telemetry.SUPERVISOR_SWEEP_COMPLETED: set(),
        telemetry.APPROVAL_OVERDUE: set(),
    }


# ---- reading the workbook and its queries --------------------------------------------------------------
def workbook() -> dict[str, Any]:
    return json.loads(WORKBOOK_JSON.read_text())


def queries() -> dict[str, str]:
    """Every KQL query item's query, by item name."""
    return {item["name"]: item["content"]["query"] for item in workbook()["items"] if item["type"] == 3}


def titles() -> dict[str, str]:
    """Every KQL query item's title (what the portal shows), by item name."""
    return {item["name"]: item["content"]["title"] for item in workbook()["items"] if item["type"] == 3}


def statements(query: str) -> list[tuple[list[str], str]]:
    """Each statement of a query (split at ';' outside strings) as (its sources, its text); a source is the
    table, union of tables, or ``let`` name a tabular statement starts from. Scalar lets have none."""
    parts = re.split(r";(?=(?:[^']*'[^']*')*[^']*$)", query)
    found = []
    for part in parts:
        text = part.strip()
        if not text:
            continue
        let = re.match(r"let\s+(\w+)\s*=\s*(.*)", text, re.S)
        expression = let.group(2) if let else text
        head = expression.split("|", 1)[0].strip()
        if head.startswith("union "):
            sources = [name.strip() for name in head.removeprefix("union ").split(",")]
        elif re.fullmatch(r"\w+", head):
            sources = [head]
        else:
            sources = []  # a scalar: a literal, toscalar(...)
        found.append((sources, text))
    return found


def query_problems(query: str) -> list[str]:
    """What is wrong with one panel's query, [] when nothing is."""
    problems: list[str] = []
    if not query.strip():
        return ["empty query"]
    lets: set[str] = set()
    tables_used: set[str] = set()
    for sources, text in statements(query):
        let = re.match(r"let\s+(\w+)", text)
        unknown = [s for s in sources if s not in TABLES and s not in lets]
        if unknown:
            problems.append(f"reads {unknown}, not an Application Insights table or a let")
        tables = {s for s in sources if s in TABLES}
        tables_used |= tables
        if tables and not re.search(r"\|\s*where timestamp \{TimeRange\}", text):
            problems.append(f"{sorted(tables)} not limited to the time range ({{TimeRange}})")
        problems += _name_problems(tables, text)
        problems += _dimension_problems(tables, text)
        if let:
            lets.add(let.group(1))
    if not tables_used:
        problems.append("reads no Application Insights table")
    for literal in re.findall(r"'(orders\.[^']*)'", query):
        if literal not in METRICS:
            problems.append(f"{literal!r} is not a metric of the contract")
    for listed in re.findall(r"\bstate\s+in\s*\(([^)]*)\)", query):
        for state in re.findall(r"'([^']*)'", listed):
            if state not in STATES:
                problems.append(f"state {state!r} is not a ProcessState")
    return problems


def _compared_names(text: str) -> list[str]:
    names = re.findall(r"\bname\s*==\s*'([^']*)'", text)
    for listed in re.findall(r"\bname\s+in\s*\(([^)]*)\)", text):
        names += re.findall(r"'([^']*)'", listed)
    return names


def _name_problems(tables: set[str], text: str) -> list[str]:
    problems = []
    allowed: set[str] = set()
    if "customMetrics" in tables:
        allowed |= set(METRICS)
    if "customEvents" in tables:
        allowed |= set(event_fields())
    for table in tables & set(SPAN_TABLES):
        allowed |= SPAN_TABLES[table]
    for name in _compared_names(text):
        if name in RENAMED_SPANS:
            problems.append(f"{name!r}: the exporter renames this span in Application Insights")
        elif name not in allowed:
            problems.append(f"{name!r} is not a name {sorted(tables)} holds under the telemetry contract")
    return problems


def _dimension_problems(tables: set[str], text: str) -> list[str]:
    problems = []
    keys = re.findall(r"customDimensions\['([^']*)'\]", text)
    names = _compared_names(text)
    if tables == {"customMetrics"}:
        allowed = set().union(*(METRICS.get(n, set()) for n in names))
    elif tables == {"customEvents"}:
        allowed = set().union(*(event_fields().get(n, set()) for n in names))
    elif tables and tables <= set(SPAN_TABLES):
        allowed = {a for a in SPAN_ATTRIBUTES if not _is_standard_attribute(a)}
    else:
        allowed = set()
    for key in keys:
        if key not in allowed:
            problems.append(f"customDimensions[{key!r}] is not carried there ({sorted(tables)} {names})")
    return problems


# ---- the deployment ------------------------------------------------------------------------------------
def test_main_deploys_the_workbook_with_the_application_insights_id() -> None:
    main = parse_file(INFRA / "main.bicep")
    (found,) = [m for m in main.modules.values() if m.path == "app/workbook.bicep"]
    body = body_object(found.body)
    assert body is not None
    scope = body.get("scope")
    assert isinstance(scope, Ref) and scope.name == "rg"
    params = body.get("params")
    assert isinstance(params, Obj)
    source = params.get("applicationInsightsResourceId")
    assert isinstance(source, Access)
    assert isinstance(source.base, Ref) and source.base.name == "monitoring"
    assert source.path == ("outputs", "applicationInsightsResourceId")
    monitoring = parse_file(INFRA / "app" / "monitoring.bicep")
    assert "applicationInsightsResourceId" in monitoring.outputs


def _workbook_resource(component: str = COMPONENT) -> dict[str, Any]:
    evaluator = Evaluator(
        WORKBOOK_BICEP,
        {
            "displayName": "Order processing (x)",
            "location": "westeurope",
            "tags": {"azd-env-name": "x"},
            "applicationInsightsResourceId": component,
        },
    )
    (symbol,) = evaluator.file.resources
    return evaluator.resource(symbol)


def test_the_workbook_is_a_shared_workbook_listed_under_the_component() -> None:
    resource = _workbook_resource()
    assert resource["type"] == "Microsoft.Insights/workbooks"
    assert resource["kind"] == "shared"
    properties = resource["properties"]
    assert properties["category"] == "workbook"
    assert properties["sourceId"] == COMPONENT
    assert properties["displayName"] == "Order processing (x)"
    assert properties["version"] == "Notebook/1.0"
    assert resource["location"] == "westeurope"
    assert resource["tags"] == {"azd-env-name": "x"}


def test_the_workbook_name_is_a_guid_fixed_by_the_component() -> None:
    # A redeployment must update the workbook, not add one: the name depends on the component only.
    name = _workbook_resource()["name"]
    uuid.UUID(name)
    assert _workbook_resource()["name"] == name
    assert _workbook_resource(COMPONENT + "-other")["name"] != name


def test_the_deployed_content_is_workbook_json_run_against_the_component() -> None:
    data = json.loads(_workbook_resource()["properties"]["serializedData"])
    assert data["fallbackResourceIds"] == [COMPONENT]
    assert {k: v for k, v in data.items() if k != "fallbackResourceIds"} == workbook()


# ---- the content ---------------------------------------------------------------------------------------
def test_workbook_json_is_a_notebook() -> None:
    content = workbook()
    assert content["version"] == "Notebook/1.0"
    items = content["items"]
    assert items and all(item["type"] in (1, 3, 9, 11, 12) for item in items)
    names = [item["name"] for item in items]
    assert len(names) == len(set(names)), "item names must be unique"
    # The resource's id comes from Bicep; the file holds none (it is the same for every deployment).
    assert "fallbackResourceIds" not in content
    assert "/subscriptions/" not in WORKBOOK_JSON.read_text()
    for item in items:
        width = item.get("customWidth")
        assert width is None or 0 < int(width) <= 100, item["name"]
        if item["type"] == 1:
            assert item["content"]["json"].strip(), item["name"]
        if item["type"] == 3:
            query = item["content"]
            assert query["version"] == "KqlItem/1.0", item["name"]
            assert query["queryType"] == 0, f"{item['name']}: not a Logs query"
            assert query["resourceType"] == "microsoft.insights/components", item["name"]
            assert query["title"].strip(), item["name"]
            assert query["visualization"] in VISUALIZATIONS, item["name"]
            assert query.get("timeContextFromParameter") == "TimeRange", item["name"]


def test_the_parameters_are_a_time_range_and_an_order_id() -> None:
    (parameters,) = [item for item in workbook()["items"] if item["type"] == 9]
    assert parameters["content"]["version"] == "KqlParameterItem/1.0"
    declared = {p["name"]: p for p in parameters["content"]["parameters"]}
    ids = [p["id"] for p in declared.values()]
    assert len(set(ids)) == len(ids)
    for parameter_id in ids:
        uuid.UUID(parameter_id)
    assert declared["TimeRange"]["type"] == 4 and declared["TimeRange"]["isRequired"]
    assert declared["OrderId"]["type"] == 1
    # Every parameter a query uses is declared, before the queries.
    first_query = min(i for i, item in enumerate(workbook()["items"]) if item["type"] == 3)
    assert workbook()["items"].index(parameters) < first_query
    for name, query in queries().items():
        used = set(re.findall(r"\{(\w+)(?::\w+)?\}", query))
        assert used <= set(declared), f"{name}: {used - set(declared)} not declared"


@pytest.mark.parametrize("name", sorted(queries()))
def test_every_query_reads_only_what_the_engine_emits(name: str) -> None:
    problems = query_problems(queries()[name])
    assert not problems, f"panel {name!r} ({titles()[name]!r}):\n  " + "\n  ".join(problems)


def test_every_metric_and_alert_event_has_a_panel() -> None:
    text = "\n".join(queries().values())
    charted = set(re.findall(r"'(orders\.[^']*)'", text))
    assert charted == set(METRICS), set(METRICS) - charted
    events = {n for q in queries().values() for n in _compared_names(q) if n in event_fields()}
    assert events == {telemetry.ORDER_ENTERED_ERROR, telemetry.POISON_MESSAGE}
    # Step percentiles come from span durations: histograms in customMetrics carry no buckets.
    assert any("percentile(duration" in q and "'agent.call'" in q for q in queries().values())


def test_the_throughput_panel_charts_the_finishing_states_per_five_minutes() -> None:
    query = queries()["throughput"]
    assert "bin(timestamp, 5m)" in query and "sum(valueSum)" in query
    (listed,) = re.findall(r"\bstate\s+in\s*\(([^)]*)\)", query)
    assert set(re.findall(r"'([^']*)'", listed)) == {"Processed", "Compensated", "Error"}


def test_the_workbook_says_how_to_open_one_orders_trace() -> None:
    texts = "\n".join(item["content"]["json"] for item in workbook()["items"] if item["type"] == 1)
    for needed in ("order.id", "operation_Id", "end-to-end transaction", "Transaction search"):
        assert needed in texts, needed
    assert "customDimensions['order.id']" in queries()["order-trace"]


# ---- the query check itself: each mistake it exists for is caught --------------------------------------
@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("", "empty query"),
        ("customMetrics | where name == 'orders.state.entered'", "not limited to the time range"),
        ("customMetric | where timestamp {TimeRange}", "not an Application Insights table"),
        ("customMetrics | where timestamp {TimeRange} | where name == 'orders.step.retry'", "not a metric"),
        ("requests | where timestamp {TimeRange} | where name == 'supervisor.sweep'", "not a name"),
        ("dependencies | where timestamp {TimeRange} | where name == 'http.call'", "renames this span"),
        ("customEvents | where timestamp {TimeRange} | where name == 'OrderError'", "not a name"),
        (
            "customMetrics | where timestamp {TimeRange} | where name == 'orders.queue.age' "
            "| summarize by tostring(customDimensions['step.name'])",
            "customDimensions['step.name'] is not carried there",
        ),
        (
            "requests | where timestamp {TimeRange} | where name == 'agent.call' "
            "| summarize by tostring(customDimensions['peer.service'])",
            "customDimensions['peer.service'] is not carried there",
        ),
        (
            "customEvents | where timestamp {TimeRange} | where name == 'PoisonMessageRejected' "
            "| project tostring(customDimensions['orderId'])",
            "customDimensions['orderId'] is not carried there",
        ),
        (
            "customMetrics | where timestamp {TimeRange} | where name == 'orders.state.entered' "
            "| extend state = tostring(customDimensions['state']) | where state in ('Done')",
            "not a ProcessState",
        ),
        ("let x = 'a'; x | where timestamp {TimeRange}", "reads no Application Insights table"),
    ],
)
def test_the_query_check_catches(query: str, problem: str) -> None:
    found = query_problems(query)
    assert any(problem in p for p in found), found


def test_the_contract_names_what_the_engine_emits() -> None:
    assert set(METRICS) == set(metrics.METRIC_NAMES)
    assert set(SPAN_KINDS) == set(tracing.SPAN_NAMES)
