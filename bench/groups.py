"""A group's steps side by side: how long the returns workflow's group takes against one step.

Run by ``make bench-groups`` (or ``python bench/groups.py --orders 10``). It starts orders-devhost on free
ports (``bench/latency.py``'s settings: no Supervisor sweep during the run, deadlines far away), makes
every simulated service answer each call 200 ms late (the simulators' ``latencyMs``, no faults), then
submits returns orders (``order-return``, version 2) strictly one after another, a few unmeasured first.
Each order runs ``collect-return`` on its own, then the group ``settle-return``: ``refund-payment``,
``restock-inventory`` and ``send-return-notice``, one call each, on three services.

How the times are taken: from the Scheduler's own status messages (the stack's status queue), whose
``at`` is the time of the transition that published them, on the workers' clock, so no client polling or
HTTP round trip is in the figures:

- ``received`` is published by the transition that takes the order and dispatches ``collect-return``;
- ``step-completed`` of ``collect-return`` by the transition that records its reply and dispatches the
  whole group (one transition: the group's dispatch time);
- ``step-completed`` of each step of the group by the transition that records that step's reply.

So one step takes ``collect-return``'s step-completed minus received, and the group takes the last of
its steps' step-completed minus ``collect-return``'s. Both spans run from a dispatching transition to the
transition that records the (last) reply: the same path (request queue, Agent, a 200 ms call, reply
queue, Scheduler), so they compare like with like. Side by side the group should take about one step
(target: within 1.3x); one after another it would take three (3x).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
from azure.servicebus import ServiceBusClient

from devhost import launch
from engine import queues
from latency import STACK_ENV, Percentiles  # the sibling benchmark's settings and summary
from orders.catalog import CATALOG, RETURNS, SERVICES
from servicebus_emulator.launcher import connection_string

LATENCY_MS = 200
TARGET_RATIO = 1.3
WARMUP_ORDERS = 2
[SINGLE] = [step.name for step in RETURNS.steps if step.group is None]
GROUP = [step.name for step in RETURNS.steps if step.group is not None]


def _order() -> dict[str, object]:
    current = CATALOG.current(RETURNS.name)
    if current is not RETURNS or not RETURNS.examples():
        raise RuntimeError(
            f"{RETURNS.name} version {RETURNS.version} is not the current one, or has no example"
        )
    return {"workflow": RETURNS.name, **RETURNS.examples()[0]}


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def one_order(api: httpx.Client, sb: ServiceBusClient, timeout: float = 30.0) -> tuple[float, float]:
    """Submit one returns order, read its status messages until ``processed``; return seconds (the
    single step, the group)."""
    order_id = f"grp-{uuid.uuid4().hex[:12]}"
    response = api.post("/api/orders", json={"orderId": order_id, **_order()})
    if response.status_code != 202:
        raise RuntimeError(f"submission answered {response.status_code}: {response.text}")
    events: dict[tuple[str, str | None], datetime] = {}
    deadline = time.monotonic() + timeout
    with sb.get_queue_receiver(queues.STATUS_QUEUE) as receiver:
        while ("processed", None) not in events:
            if time.monotonic() > deadline:
                raise RuntimeError(f"order {order_id} not processed within {timeout}s: {sorted(events)}")
            for message in receiver.receive_messages(max_message_count=50, max_wait_time=1):
                receiver.complete_message(message)
                body = json.loads(str(message))
                if body["orderId"] != order_id:
                    continue  # an earlier order's late message (one order at a time: none expected)
                if body["event"] in ("compensating", "error"):
                    raise RuntimeError(f"order {order_id}: {body['event']} ({body.get('detail')})")
                events.setdefault((body["event"], body.get("step")), _at(body["at"]))
    group_start = events[("step-completed", SINGLE)]
    single = (group_start - events[("received", None)]).total_seconds()
    group = (max(events[("step-completed", name)] for name in GROUP) - group_start).total_seconds()
    return single, group


def measure(
    api_url: str, sb_port: int, orders: int, warmup: int = WARMUP_ORDERS
) -> list[tuple[float, float]]:
    with (
        httpx.Client(base_url=api_url, timeout=30) as api,
        ServiceBusClient.from_connection_string(connection_string(sb_port)) as sb,
    ):
        for _ in range(warmup):
            one_order(api, sb)
        return [one_order(api, sb) for _ in range(orders)]


def report(samples: list[tuple[float, float]]) -> str:
    single = Percentiles.of([s for s, _ in samples])
    group = Percentiles.of([g for _, g in samples])
    ratio50, ratio90 = group.p50_ms / single.p50_ms, group.p90_ms / single.p90_ms
    verdict = "meets" if ratio50 <= TARGET_RATIO else "misses"
    return (
        f"a group of {len(GROUP)} steps side by side against one step, {len(samples)} {RETURNS.name} orders "
        f"(version {RETURNS.version}) one at a time, every service answering {LATENCY_MS} ms late:\n"
        f"  one step ({SINGLE}): p50 {single.p50_ms:.0f} ms, p90 {single.p90_ms:.0f} ms, "
        f"max {single.max_ms:.0f} ms\n"
        f"  the group ({', '.join(GROUP)}): p50 {group.p50_ms:.0f} ms, p90 {group.p90_ms:.0f} ms, "
        f"max {group.max_ms:.0f} ms\n"
        f"  group / one step: p50 {ratio50:.2f}x, p90 {ratio90:.2f}x (target <= {TARGET_RATIO}x: {verdict}; "
        f"one after another would be {len(GROUP)}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=10, help="measured orders (default 10)")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_ORDERS, help="unmeasured orders first (default 2)"
    )
    parser.add_argument("--workers", type=int, default=2, help="function workers (default 2)")
    args = parser.parse_args()
    if args.orders < 1 or args.workers < 1 or args.warmup < 0:
        parser.error("--orders and --workers must be at least 1, --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="orders-groups-") as tmp:
        devhost = launch.start(Path(tmp) / "stack", workers=args.workers, env=STACK_ENV)
        try:
            slow = {service.name: {"latencyMs": LATENCY_MS} for service in SERVICES}
            response = httpx.post(f"{devhost.simulators_url}/faults", json=slow, timeout=10)
            response.raise_for_status()
            samples = measure(devhost.api_url, devhost.sb_port, args.orders, args.warmup)
        finally:
            devhost.stop()
    print(report(samples))


if __name__ == "__main__":
    main()
