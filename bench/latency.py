"""Per-step overhead: one order at a time through three calls, with zero-latency remote services.

Run by ``make bench`` (or ``python bench/latency.py --orders 30``). It starts orders-devhost on free ports
with the simulators answering at once and no faults, then submits ``--orders`` orders strictly one after
another: each is submitted only once the previous one is Processed, so nothing else loads the stack.
For each order it takes the time from submission to Processed three ways:

- submission to Processed: from the moment the client sends ``POST /api/orders`` to the order's
  ``updatedAt`` (written by the transition to Processed). Client and workers share this machine's clock;
- inside the stack: the order's ``createdAt`` (written once the submission is parsed and stored) to its
  ``updatedAt``, which leaves out the HTTP request and the submission itself;
- as the client saw it: from sending the POST to the first ``GET`` that shows Processed (polled every
  ``POLL_SECONDS``), which adds the polling delay and the GET.

It prints p50 and p90 of each and the target (submission to Processed, p50 <= 60 ms). ``measure`` takes
an already running stack, so other benchmarks and the profiler can reuse it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
from pydantic import BaseModel

from devhost import launch
from orders.catalog import CATALOG

TARGET_P50_MS = 60.0
POLL_SECONDS = 0.02  # the target figure does not depend on it; polling more often loads worker 1


# The order measured: three calls, one after another. The figure's target was set for an order of three
# steps, which the returns workflow was until it settled side by side (bench/groups.py measures that).
# Fulfilment's declared example of digital goods only runs three calls: reserve, charge, confirm (its
# fraud review and its shipment are left out by their conditions, and its cancellation window, set to 0
# below, ends as its turn comes, in the same transition).
WORKFLOW = "order-fulfilment"
EXAMPLE = 1  # the second declared example: one e-book


def _example(workflow_name: str = WORKFLOW, which: int = EXAMPLE) -> dict[str, object]:
    """What each order carries: the workflow's name and one of its declared example inputs."""
    workflow = CATALOG.current(workflow_name)
    if workflow is None or len(workflow.examples()) <= which:
        raise RuntimeError(f"the catalog's workflow {workflow_name} declares no example input {which}")
    return {"workflow": workflow_name, **workflow.examples()[which]}


def _calls(workflow_name: str = WORKFLOW, which: int = EXAMPLE) -> int:
    """How many calls an order of the example makes: its steps that call a service and whose condition
    holds on the input (the example's conditions read only the input)."""
    workflow = CATALOG.current(workflow_name)
    assert workflow is not None
    document = {"input": workflow.examples()[which], "results": {}}
    return sum(1 for s in workflow.steps if s.calls and (s.when is None or s.when.holds(document)))


ORDER = _example()
STEPS = _calls()
# Settings for the stack: a Supervisor that does not fire during the run, deadlines far away, and no
# cancellation window to wait through.
STACK_ENV = {
    "SUPERVISOR_SCHEDULE": "0 0 0 * * *",
    "STEP_COMPLETE_BY_SECONDS": "60",
    "CANCELLATION_WINDOW_SECONDS": "0",
}


class Percentiles(BaseModel):
    """p50 and p90 of a set of durations, in milliseconds."""

    p50_ms: float
    p90_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Percentiles:
        """Nearest-rank percentiles of ``seconds``; raises ValueError on an empty list."""
        if not seconds:
            raise ValueError("no durations to summarise")
        ordered = sorted(seconds)

        def rank(p: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))] * 1000

        return cls(p50_ms=statistics.median(ordered) * 1000, p90_ms=rank(0.9), max_ms=ordered[-1] * 1000)


class LatencyResult(BaseModel):
    """Submission to Processed, one order at a time."""

    orders: int
    submission: Percentiles  # POST sent -> updatedAt
    inside: Percentiles  # createdAt -> updatedAt
    client: Percentiles  # POST sent -> Processed seen

    def meets_target(self) -> bool:
        """True when submission to Processed has a p50 within the target."""
        return self.submission.p50_ms <= TARGET_P50_MS


def _timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def one_order(
    api: httpx.Client, timeout: float = 30.0, poll_seconds: float = POLL_SECONDS
) -> tuple[float, float, float]:
    """Submit one order and wait for Processed; return seconds (submission, inside, client).

    Raises RuntimeError if the order is refused, ends in another terminal state or is not done in time.
    """
    order_id = f"lat-{uuid.uuid4().hex[:12]}"
    sent_at = time.time()  # wall clock, to compare with the workers' timestamps
    sent = time.perf_counter()
    response = api.post("/api/orders", json={"orderId": order_id, **ORDER})
    if response.status_code != 202:
        raise RuntimeError(f"submission answered {response.status_code}: {response.text}")
    deadline = sent + timeout
    while True:
        view = api.get(f"/api/orders/{order_id}").json()
        state = view.get("processState")
        if state == "Processed":
            seen = time.perf_counter()
            done = _timestamp(view["updatedAt"])
            inside = (done - _timestamp(view["createdAt"])).total_seconds()
            return done.timestamp() - sent_at, inside, seen - sent
        if state in ("Compensated", "Error"):
            raise RuntimeError(f"order {order_id} ended {state}: {view.get('lastError')}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"order {order_id} not Processed within {timeout}s (last seen {state})")
        time.sleep(poll_seconds)  # polling order status over HTTP


# Unmeasured orders first. Each worker's first message on each queue pays for opening its links and
# connections (the first two orders of a fresh stack take 2-3 s each), and the messages of an order go
# to either worker: after ten, every function has almost surely had its first call on both.
WARMUP_ORDERS = 10


def measure(api_url: str, orders: int = 30, warmup: int = WARMUP_ORDERS) -> LatencyResult:
    """Run ``warmup`` unmeasured orders, then ``orders`` measured ones, one at a time, against ``api_url``."""
    with httpx.Client(base_url=api_url, timeout=30) as api:
        for _ in range(warmup):
            one_order(api)
        samples = [one_order(api) for _ in range(orders)]
    return LatencyResult(
        orders=orders,
        submission=Percentiles.of([s[0] for s in samples]),
        inside=Percentiles.of([s[1] for s in samples]),
        client=Percentiles.of([s[2] for s in samples]),
    )


def report(result: LatencyResult) -> str:
    """The printed lines: the three views, and the target against submission to Processed."""
    s, i, c = result.submission, result.inside, result.client
    verdict = "meets" if result.meets_target() else "misses"
    return (
        f"per-step overhead, {result.orders} orders one at a time through {STEPS} steps ({WORKFLOW}), "
        "zero-latency services:\n"
        f"  submission to Processed (POST sent -> updatedAt): p50 {s.p50_ms:.0f} ms, p90 {s.p90_ms:.0f} ms, "
        f"max {s.max_ms:.0f} ms (target p50 <= {TARGET_P50_MS:.0f} ms: {verdict})\n"
        f"  inside the stack (createdAt -> updatedAt): p50 {i.p50_ms:.0f} ms, p90 {i.p90_ms:.0f} ms\n"
        f"  as the client saw it (POST sent -> Processed seen): p50 {c.p50_ms:.0f} ms, p90 {c.p90_ms:.0f} ms"
    )


def main() -> None:
    """Start a stack, measure, print, stop the stack."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=30, help="measured orders (default 30)")
    parser.add_argument("--workers", type=int, default=2, help="function workers (default 2)")
    args = parser.parse_args()
    if args.orders < 1 or args.workers < 1:
        parser.error("--orders and --workers must be at least 1")
    with tempfile.TemporaryDirectory(prefix="orders-latency-") as tmp:
        devhost = launch.start(Path(tmp) / "stack", workers=args.workers, env=STACK_ENV)
        try:
            result = measure(devhost.api_url, args.orders)
        finally:
            devhost.stop()
    print(report(result))


if __name__ == "__main__":
    main()
