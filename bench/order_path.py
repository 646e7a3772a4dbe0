"""Where one order's time goes, hop by hop: a table per step transition. Run by ``make profile``.

It starts orders-devhost (2 workers, zero-latency services, no faults) with ``bench/tracing`` on the
workers' ``PYTHONPATH``, so that each records when an order passes each point of its path
(``tracing/sitecustomize.py``), and submits ``--orders`` orders strictly one after another (after
``latency.WARMUP_ORDERS`` unmeasured ones), each only once the last is Processed: the same load as the
per-step figure of ``bench/latency.py``, of the same workflow. Its own polling for Processed is left out
of the table (every segment is taken from the stack's timestamps).

The path is cut into contiguous segments, from the client sending ``POST /api/orders`` to the save that
makes the order Processed, so the segments of one order add up to its whole time:

- submission: the HTTP request to the host, the host handing it to the function, the function up to
  the state store, the store's requests (watch entry, history, the order's transaction);
- the claim at submission, in the same function (``Scheduler.start``): up to its save, the save, then up
  to the first request's send;
- each later Scheduler transition (a reply): the hop (from the send of the message that carries it to
  the Service Bus host handing it on: the send's round trip, the broker, the receiver), the hand-over to
  the function through the runtime, the engine up to its save, the save (one table transaction), then up
  to the next request's send;
- each Agent call: the hop, the hand-over, the Agent up to the remote call, the request reaching the
  simulator, the simulator's handling, the answer back, then up to the reply's send.

It prints, for each segment, the p50 and p90 over the orders, and the p50 of the whole, then the same
time summed by kind (hops, hand-overs, engine and Agent code, table requests, remote calls, the
simulators' own handling). Segments
overlap nothing on an order's path, but the stack does other work meanwhile (status messages,
settlements), which shows up in the segments it delays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx

from devhost import launch
from latency import STACK_ENV, STEPS, WARMUP_ORDERS, WORKFLOW, one_order
from stack_cpu import CpuMeter, per_order_report

TRACING = Path(__file__).resolve().parent / "tracing"
POLL_SECONDS = 0.05  # not part of the figures: the table is made of the stack's own timestamps


@dataclass(frozen=True)
class Event:
    """One line of the trace."""

    at_ns: int
    pid: int
    event: str
    function: str
    detail: str


def read_trace(path: Path) -> list[Event]:
    """Every event in ``path``, in time order. Raises RuntimeError if a wrapper could not be put in place."""
    events = []
    for line in path.read_text().splitlines():
        at, pid, event, function, detail = line.split(" ", 4)
        if event == "unwrapped":
            raise RuntimeError(f"the trace hook could not wrap {function} {detail}: update bench/tracing")
        events.append(Event(int(at), int(pid), event, function, detail))
    return sorted(events, key=lambda e: e.at_ns)


class _Path:
    """Finds an order's events one after another (each search starts where the last one matched)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events

    def find(
        self, after_ns: int, event: str, function: str | None = None, detail: str | None = None
    ) -> Event:
        for e in self.events:
            if e.at_ns < after_ns or e.event != event:
                continue
            if function is not None and e.function != function:
                continue
            if detail is not None and not e.detail.startswith(detail):
                continue
            return e
        raise LookupError(f"no {event} {function or ''} {detail or ''} after {after_ns}")


def segments(events: list[Event], sent_ns: int, steps: int) -> list[tuple[str, str, str, float]]:
    """One order's path as (part, segment, kind, milliseconds), in order, from the POST to Processed.

    Kinds: ``http``, ``hop``, ``hand-over``, ``code``, ``table``, ``call`` (the HTTP exchange with a
    remote service, both ways), ``service`` (the simulator's own handling of the call).
    """
    p = _Path([e for e in events if e.function != "get_order" and not e.detail.startswith("GET:")])
    out: list[tuple[str, str, str, float]] = []

    def add(part: str, name: str, kind: str, start: Event | int, end: Event) -> Event:
        begin = start if isinstance(start, int) else start.at_ns
        out.append((part, name, kind, (end.at_ns - begin) / 1e6))
        return end

    http = p.find(sent_ns, "http>", detail="POST:/api/orders")
    add("submission", "client -> HTTP host", "http", sent_ns, http)
    invoked = add(
        "submission",
        "HTTP host -> submit_order",
        "hand-over",
        http,
        p.find(http.at_ns, "invoke>", "submit_order"),
    )
    created = add(
        "submission", "submit_order -> state store", "code", invoked, p.find(invoked.at_ns, "table.create>")
    )
    # The task is written claimed (Scheduler.claim_new): the submission's insert is the claim's save.
    saved = add(
        "submission",
        "create: watch entry, history, order (claimed)",
        "table",
        created,
        p.find(created.at_ns, "table.create<"),
    )
    # Then the first request from the submitting function, and each step's call and its reply's transition.
    part, function = "submission", "submit_order"
    for k in range(steps):
        sent = add(
            part,
            f"save -> step {k + 1}'s request sent",
            "code",
            saved,
            p.find(saved.at_ns, "send>", function, "agent-"),
        )
        agent = f"agent_{sent.detail.removeprefix('agent-')}"
        part = f"step {k + 1} ({agent})"
        received = add(part, "hop: sent -> received", "hop", sent, p.find(sent.at_ns, "received", agent))
        invoked = add(
            part, f"host -> {agent}", "hand-over", received, p.find(received.at_ns, "invoke>", agent)
        )
        calling = add(part, "Agent -> remote call", "code", invoked, p.find(invoked.at_ns, "call>", agent))
        serving = add(
            part, "call: request to the service", "call", calling, p.find(calling.at_ns, "service>")
        )
        served = add(part, "the service (simulator)", "service", serving, p.find(serving.at_ns, "service<"))
        called = add(
            part, "call: answer back to the Agent", "call", served, p.find(served.at_ns, "call<", agent)
        )
        sent = add(
            part,
            "call -> reply sent",
            "code",
            called,
            p.find(called.at_ns, "send>", agent, "scheduler-replies"),
        )
        part, function = f"step {k + 1}'s reply", "scheduler_replies"
        received = add(part, "hop: sent -> received", "hop", sent, p.find(sent.at_ns, "received", function))
        invoked = add(
            part, f"host -> {function}", "hand-over", received, p.find(received.at_ns, "invoke>", function)
        )
        saving = add(part, "engine -> save", "code", invoked, p.find(invoked.at_ns, "table.save>", function))
        saved = add(part, "save", "table", saving, p.find(saving.at_ns, "table.save<", function))
    return out


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))]


def report(orders: list[list[tuple[str, str, str, float]]]) -> str:
    """The table of segments, then the time by kind."""
    rows: dict[tuple[str, str], list[float]] = defaultdict(list)
    kinds: dict[tuple[str, str], str] = {}
    totals: list[float] = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    for order in orders:
        totals.append(sum(ms for *_, ms in order))
        per_kind: dict[str, float] = defaultdict(float)
        for part, name, kind, ms in order:
            rows[(part, name)].append(ms)
            kinds[(part, name)] = kind
            per_kind[kind] += ms
        for kind, ms in per_kind.items():
            by_kind[kind].append(ms)
    lines = [
        f"where an order's time goes: {len(orders)} orders of {WORKFLOW} ({STEPS} steps) one at a time, "
        "zero-latency services, 2 workers",
        f"{'part':<28} {'segment':<38} {'kind':<10} {'p50 ms':>7} {'p90 ms':>7}",
    ]
    last_part = None
    for (part, name), values in rows.items():
        shown = part if part != last_part else ""
        last_part = part
        lines.append(
            f"{shown:<28} {name:<38} {kinds[(part, name)]:<10} "
            f"{statistics.median(values):>7.1f} {percentile(values, 0.9):>7.1f}"
        )
    whole = statistics.median(totals)
    lines.append(
        f"{'whole order (POST sent -> Processed saved)':<78} {whole:>7.1f} {percentile(totals, 0.9):>7.1f}"
    )
    lines.append("\nby kind (each order's sum; p50 over the orders, share of the whole's p50):")
    for kind in ("http", "hop", "hand-over", "code", "table", "call", "service"):
        values = by_kind.get(kind, [0.0])
        lines.append(
            f"  {kind:<10} {statistics.median(values):>7.1f} ms  {statistics.median(values) / whole:>5.0%}"
        )
    return "\n".join(lines)


def run(orders: int, data_dir: Path) -> tuple[list[list[tuple[str, str, str, float]]], dict[str, float]]:
    """Start a traced stack, run the orders, stop it; each order's segments, and the CPU seconds each
    process used over the measured orders (the benchmark's polling included)."""
    trace = data_dir / "order-path.trace"
    env = {
        **STACK_ENV,
        "ORDER_PATH_TRACE": str(trace),
        "PYTHONPATH": os.pathsep.join(p for p in (str(TRACING), os.environ.get("PYTHONPATH", "")) if p),
    }
    devhost = launch.start(data_dir / "stack", workers=2, env=env)
    sent: list[int] = []
    try:
        cpu = CpuMeter(devhost)
        with httpx.Client(base_url=devhost.api_url, timeout=30) as api:
            for n in range(WARMUP_ORDERS + orders):
                if n == WARMUP_ORDERS:
                    cpu.start()
                at = time.time_ns()  # just before one_order sends its POST
                one_order(api, poll_seconds=POLL_SECONDS)
                if n >= WARMUP_ORDERS:
                    sent.append(at)
        used = cpu.stop()
    finally:
        devhost.stop()
    events = read_trace(trace)
    return [segments(events, at, STEPS) for at in sent], used


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=30, help="measured orders (default 30)")
    args = parser.parse_args()
    if args.orders < 1:
        parser.error("--orders must be at least 1")
    with tempfile.TemporaryDirectory(prefix="orders-path-") as tmp:
        orders, used = run(args.orders, Path(tmp))
    print(report(orders))
    print("\nCPU per order, one order at a time (the trace's writes and the polling for Processed included):")
    print(per_order_report(used, args.orders))


if __name__ == "__main__":
    main()
