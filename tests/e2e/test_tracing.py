"""One order, one trace, on the local stack: every hop's span (submission, the Scheduler's transitions, the
Agents' calls and their HTTP tries, the replies) in the trace the caller started, each a child of the span
that caused it; an operator's action and the Supervisor's recovery in the order's trace, linked to the
request and the sweep that made them; and the metrics the workers wrote, against what the orders' own
records say happened."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.otlp_file import MetricTotal, SpanRecord, metric_totals, metrics_path, read_spans, spans_path
from devhost import trace_cli
from engine import metrics, tracing
from tests.e2e.conftest import FIRST_STEP, LocalStack, new_order, start_stack, stop_stack
from tests.support import wait_for

HANG = {"hangRate": 1, "hangMs": 60_000}
ENDINGS = {"succeeded": "succeeded", "failed": "failed", "timed out": "timeout"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(tmp_path_factory.mktemp("tracing"), workers=2)
    try:
        yield running
    finally:
        stop_stack(running)


def caller_context() -> tuple[str, str, str]:
    """A caller's traceparent, its trace id and its span id."""
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def spans_of(stack: LocalStack, trace_id: str) -> list[SpanRecord]:
    """The trace's spans written so far (none before the workers' first batch creates the file)."""
    path = spans_path(stack.data_dir)
    return [s for s in read_spans(path) if s.trace_id == trace_id] if path.exists() else []


def answered(order: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(step, call entry) for every dispatch of the order that its service answered."""
    return [
        (step["name"], call)
        for step in order["steps"]
        for call in step["calls"]
        if call["kind"] != "wait" and call["outcome"] in ("succeeded", "failed")
    ]


def wait_spans(stack: LocalStack, order: dict[str, Any]) -> list[SpanRecord]:
    """The order's trace once every reply its records show has its span written, and every span's parent
    but the root's: spans go out in batches, each process its own, so a reply's span may be written before
    the span of the hop that caused it (seen on a busy machine)."""
    replies = len(answered(order))

    def complete() -> list[SpanRecord] | None:
        spans = spans_of(stack, order["traceId"])
        done = sum(s.name == tracing.SCHEDULER_REPLY and tracing.ORDER_ID in s.attributes for s in spans)
        written = {s.span_id for s in spans}
        orphans = sum(s.parent_span_id not in written for s in spans)
        return spans if done >= replies and orphans <= 1 else None

    what = f"the spans of {order['orderId']}: a reply's for each answered call, and one root"
    return wait_for(complete, timeout=20, interval=0.3, what=what)


def check_tree(spans: list[SpanRecord], order: dict[str, Any]) -> dict[str, SpanRecord]:
    """Every span of the trace but its root is a child of one in it, each hop of the one that caused it."""
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    roots = [s for s in spans if s.parent_span_id not in by_id]
    assert [s.name for s in roots] == ["POST /api/orders"], [(s.name, s.parent_span_id) for s in roots]
    causes = {
        tracing.ORDER_SUBMIT: ("POST /api/orders",),
        tracing.AGENT_CALL: (
            tracing.SCHEDULER_COMMAND,
            tracing.SCHEDULER_REPLY,
            tracing.SUPERVISOR_RECOVER,
            tracing.OPERATOR_ACTION,
        ),
        tracing.HTTP_CALL: (tracing.AGENT_CALL,),
        tracing.SCHEDULER_REPLY: (tracing.AGENT_CALL, tracing.CALLBACK_RECEIVE),
        tracing.SCHEDULER_COMMAND: (
            tracing.ORDER_SUBMIT,
            tracing.SCHEDULER_REPLY,
            tracing.SCHEDULER_COMMAND,
            tracing.SUPERVISOR_RECOVER,
            tracing.OPERATOR_ACTION,
        ),
    }
    for span in spans:
        if span in roots:
            continue
        parent = by_id[span.parent_span_id or ""]
        assert parent.start_ns <= span.start_ns, (span.name, parent.name)
        if span.name in causes:
            assert parent.name in causes[span.name], f"{span.name} under {parent.name}"
        if span.name == tracing.SCHEDULER_REPLY and parent.name == tracing.AGENT_CALL:
            # A reply is handled under the call that sent it: the same step and attempt.
            for name in (tracing.STEP, tracing.ATTEMPT, tracing.ORDER_ID):
                assert span.attributes.get(name) == parent.attributes.get(name), (name, span, parent)
    # Each answered dispatch has its Agent's span, and under it the HTTP try that got the answer.
    for step, call in answered(order):
        agents = [
            s
            for s in spans
            if s.name == tracing.AGENT_CALL
            and s.attributes.get(tracing.STEP) == step
            and s.attributes.get(tracing.ATTEMPT) == call["attempt"]
            and s.attributes.get(tracing.COMPENSATING) == (call["kind"] == "undo")
        ]
        assert len(agents) == 1, (step, call, agents)
        [agent] = agents
        assert agent.attributes.get(tracing.OUTCOME) == call["outcome"]
        tries = [s for s in spans if s.parent_span_id == agent.span_id and s.name == tracing.HTTP_CALL]
        assert (
            len(tries) == call["tries"]
            and tries[-1].attributes["http.response.status_code"] == call["status"]
        )
    return by_id


def test_an_orders_hops_form_one_trace_under_its_caller(stack: LocalStack) -> None:
    traceparent, trace_id, span_id = caller_context()
    order_id = f"t-{uuid.uuid4().hex[:10]}"
    response = stack.api.post("/api/orders", json=new_order(order_id), headers={"traceparent": traceparent})
    assert response.status_code == 202, response.text
    order = stack.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["traceId"] == trace_id

    spans = wait_spans(stack, order)
    by_id = check_tree(spans, order)
    [request] = [s for s in spans if s.parent_span_id == span_id]  # the caller's span is its parent
    assert request.kind == "server" and request.attributes["http.response.status_code"] == 202
    assert {s.attributes.get(tracing.ORDER_ID) for s in spans if tracing.ORDER_ID in s.attributes} == {
        order_id
    }
    # Every remote call carried the order's trace to its service (the simulators' ledger says what came).
    for step, entry in stack.step_entries(order_id).items():
        assert entry.get("traceIds") == [trace_id], (step, entry)
    assert by_id  # a tree, printed by orders-trace too
    assert trace_cli.main([order_id, "--data-dir", str(stack.data_dir)]) == 0


def test_a_recovery_and_an_operators_action_join_the_orders_trace_linked_to_what_made_them(
    stack: LocalStack,
) -> None:
    service = FIRST_STEP.call_agent
    hung_before = stack.hung_calls(service)
    stack.faults(**{service: HANG})
    try:
        order_id = stack.submit()
        stack.wait_hung(service, hung_before)
        action_parent, action_trace, _ = caller_context()
        read = stack.api.get(f"/api/orders/{order_id}")
        retried = stack.api.post(
            f"/api/orders/{order_id}/steps/{FIRST_STEP.name}/retry",
            headers={"if-match": read.headers["etag"], "traceparent": action_parent},
        )
        assert retried.status_code in (200, 202), retried.text

        def recovered() -> dict[str, Any] | None:
            calls = stack.order(order_id)["steps"][0]["calls"]
            return next((c for c in calls if (c.get("recovery") or "").startswith("failure")), None)

        wait_for(recovered, timeout=30, what="the Supervisor's recovery of the hung step")
    finally:
        stack.clear_faults()
    order = stack.wait_terminal(order_id, timeout=90)
    assert order["processState"] == "Processed"
    spans = wait_spans(stack, order)
    by_id = check_tree(spans, order)
    [submitted] = [s for s in spans if s.name == tracing.ORDER_SUBMIT]

    [action] = [s for s in spans if s.name == tracing.OPERATOR_ACTION]
    assert action.parent_span_id == submitted.span_id and action.attributes[tracing.OPERATION] == "retry"
    # Linked to the request that asked for it: the operator's own trace.
    [link] = action.links
    assert link.trace_id == action_trace
    [request] = [s for s in spans_of(stack, action_trace) if s.span_id == link.span_id]
    assert request.name.startswith("POST /api/orders/") and request.name.endswith("/retry")

    recoveries = [s for s in spans if s.name == tracing.SUPERVISOR_RECOVER]
    assert recoveries and all(s.parent_span_id == submitted.span_id for s in recoveries)
    sweeps = {s.span_id: s for s in read_spans(spans_path(stack.data_dir))}
    for recovery in recoveries:
        [link] = recovery.links
        sweep = sweeps[link.span_id]
        assert sweep.name == tracing.SUPERVISOR_SWEEP and sweep.trace_id != order["traceId"]
        # Two workers' Supervisors may both find it: one recovers it, the other loses the race.
        assert recovery.attributes[tracing.RECOVERY] in ("retried", "lost a race")
    assert any(s.attributes[tracing.RECOVERY] == "retried" for s in recoveries)
    # What they sent went on in the order's trace: a dispatch under the action, one under a recovery.
    children = Counter(by_id[s.parent_span_id].name for s in spans if s.parent_span_id in by_id)
    assert children[tracing.OPERATOR_ACTION] >= 1 and children[tracing.SUPERVISOR_RECOVER] >= 1


def totals(stack: LocalStack) -> dict[tuple[str, frozenset[tuple[str, Any]]], MetricTotal]:
    return metric_totals(metrics_path(stack.data_dir))


def series(found: dict[Any, MetricTotal], name: str, **attributes: Any) -> list[MetricTotal]:
    return [
        t
        for t in found.values()
        if t.name == name and all(t.attributes.get(k) == v for k, v in attributes.items())
    ]


def test_the_metrics_count_what_the_orders_records_show(stack: LocalStack) -> None:
    # Runs after the two tests above on the same stack: every order of the stack is counted.
    orders = [stack.submit() for _ in range(3)]
    for order_id in orders:
        stack.wait_terminal(order_id)
    listed = stack.api.get("/api/orders", params={"pageSize": 100}).json()["items"]
    everything = [stack.order(item["orderId"]) for item in listed]
    assert len(everything) >= 5 and all(o["processState"] == "Processed" for o in everything)
    workflow = everything[0]["workflow"]
    durations = Counter(
        (step["name"], ENDINGS[call["outcome"]])
        for order in everything
        for step in order["steps"]
        for call in step["calls"]
        if call["kind"] != "wait" and call["outcome"] in ENDINGS
    )

    def counted() -> dict[Any, MetricTotal] | None:
        found = totals(stack)
        entered = {
            state: sum(t.value or 0 for t in series(found, metrics.STATE_ENTERED, state=state))
            for state in ("Pending", "Processed")
        }
        measured = Counter(
            {
                (t.attributes["step.name"], t.attributes["outcome"]): t.count or 0
                for t in series(found, metrics.STEP_DURATION, **{"workflow.name": workflow})
            }
        )
        # Pending again after each retry of the Supervisor's: at least once per order.
        wanted = entered["Processed"] == len(everything) <= entered["Pending"] and measured == durations
        return found if wanted else None

    found = wait_for(counted, timeout=30, interval=0.5, what="the metrics to count every order")
    timeouts = sum(n for (_, outcome), n in durations.items() if outcome == "timeout")
    retried = sum(t.value or 0 for t in series(found, metrics.STEP_RETRIES, by="supervisor"))
    assert timeouts >= 1 and retried >= 1
    for name in {o["steps"][0]["name"] for o in everything}:
        [duration] = series(found, metrics.STEP_DURATION, **{"step.name": name, "outcome": "succeeded"})
        assert duration.min is not None and 0 < duration.min <= (duration.max or 0) < 60
    breakers = {t.attributes["peer.service"]: t.value for t in series(found, metrics.BREAKER_STATE)}
    assert breakers and set(breakers.values()) <= {0, 1, 2}
    [sweeps] = series(found, metrics.SWEEP_DURATION)
    assert (sweeps.count or 0) >= 1
