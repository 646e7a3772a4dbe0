"""``make demo``: the whole system under a fault profile, with live progress and a ledger check.

It starts orders-devhost on free ports, applies a fault profile to the three remote services, submits a
batch of orders over HTTP, shows counts per ProcessState, retries, Supervisor recoveries and
compensations while they run, then prints a summary: orders per terminal state, latency from submission
to the terminal state (p50/p95), and a ledger check (every Processed order applied exactly once per
step, every Compensated order's applied steps compensated). It exits non-zero if an order is lost or an
invariant fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from devhost import launch

SERVICES = ("inventory", "payment", "shipping")
TERMINAL = ("Processed", "Compensated", "Error")
STATES = ("Pending", "Processing", "Compensating", *TERMINAL)
console = Console()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    p.add_argument("--orders", type=int, default=100, help="orders to submit (default 100)")
    p.add_argument("--workers", type=int, default=2, help="function workers (default 2)")
    p.add_argument(
        "--transient", type=float, default=0.10, help="transient fault rate per call (default 0.10)"
    )
    p.add_argument(
        "--permanent", type=float, default=0.02, help="permanent fault rate per call (default 0.02)"
    )
    p.add_argument("--hang", type=float, default=0.02, help="hang rate per call (default 0.02)")
    p.add_argument("--lost-reply", type=float, default=0.05, help="lost-reply rate per call (default 0.05)")
    p.add_argument("--latency-ms", type=int, default=20, help="latency added to every call (default 20)")
    p.add_argument("--complete-by", type=float, default=5.0, help="STEP_COMPLETE_BY_SECONDS (default 5)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for every order (default 600)")
    p.add_argument(
        "--data-dir", type=Path, default=None, help="keep the stack's data here (default: temporary)"
    )
    return p.parse_args(argv)


def start_devhost(args: argparse.Namespace, data_dir: Path) -> launch.RunningDevhost:
    env = {
        "STEP_COMPLETE_BY_SECONDS": str(args.complete_by),
        "SUPERVISOR_SCHEDULE": "*/1 * * * * *",
        "SUPERVISOR_MAX_FAILURES": os.environ.get("SUPERVISOR_MAX_FAILURES", "5"),
        "SUPERVISOR_BACKOFF_SECONDS": "0.5",
        "SUPERVISOR_MAX_BACKOFF_SECONDS": "4",
    }
    with console.status("starting Azurite, the Service Bus emulator, the simulators and the workers..."):
        try:
            return launch.start(data_dir, workers=args.workers, env=env)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc


def progress_table(orders: dict[str, dict[str, Any]], elapsed: float, submitted: int) -> Table:
    """Counts per ProcessState, and how much recovery work it took so far."""
    counts = Counter(o.get("processState", "Pending") for o in orders.values())
    steps = [s for o in orders.values() for s in o.get("steps", [])]
    table = Table(title=f"{submitted} orders, {elapsed:.0f} s", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    for state in STATES:
        table.add_row(state, str(counts.get(state, 0)))
    table.add_row("step re-dispatches", str(sum(max(s["attempts"] - 1, 0) for s in steps)))
    table.add_row("Supervisor recoveries", str(sum(o.get("failureCount", 0) for o in orders.values())))
    table.add_row("compensation calls", str(sum(s.get("compensationAttempts", 0) for s in steps)))
    return table


def check_ledger(orders: dict[str, dict[str, Any]], ledger: dict[str, dict[str, Any]]) -> list[str]:
    """Every Processed order applied once per step and never undone; every Compensated order's applied
    steps compensated."""
    problems = []
    by_order: dict[str, dict[str, dict[str, Any]]] = {}
    for service in SERVICES:
        for entry in ledger.get(service, {}).values():
            by_order.setdefault(entry["orderId"], {})[service] = entry
    for order_id, order in orders.items():
        entries = by_order.get(order_id, {})
        state = order["processState"]
        if state == "Processed":
            for service in SERVICES:
                entry = entries.get(service)
                if entry is None or entry["applied"] != 1 or entry["compensated"] != 0:
                    problems.append(f"{order_id} Processed but {service} ledger is {entry}")
        elif state == "Compensated":
            for service, entry in entries.items():
                if entry["applied"] != entry["compensated"]:
                    problems.append(f"{order_id} Compensated but {service} ledger is {entry}")
    return problems


def _seconds(order: dict[str, Any]) -> float:
    start = datetime.fromisoformat(order["createdAt"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(order["updatedAt"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def run(args: argparse.Namespace, data_dir: Path) -> int:
    devhost = start_devhost(args, data_dir)
    api = httpx.Client(base_url=devhost.api_url, timeout=30)
    sims = httpx.Client(base_url=devhost.simulators_url, timeout=30)
    try:
        profile = {
            "transientRate": args.transient,
            "permanentRate": args.permanent,
            "hangRate": args.hang,
            "lostReplyRate": args.lost_reply,
            "latencyMs": args.latency_ms,
            "hangMs": int(args.complete_by * 4000),
        }
        response = sims.post("/faults", json={s: profile for s in SERVICES})
        if response.status_code != 200:
            raise SystemExit(f"the fault profile was refused: {response.text}")
        console.print(f"fault profile on every service: {profile}")
        ids = [f"demo-{uuid.uuid4().hex[:12]}" for _ in range(args.orders)]

        def submit(order_id: str) -> int:
            body = {
                "orderId": order_id,
                "customerId": "demo-customer",
                "items": [
                    {"sku": "sku-1", "quantity": 1, "unitPrice": 12.5},
                    {"sku": "sku-2", "quantity": 3, "unitPrice": 4},
                ],
                "currency": "EUR",
            }
            return api.post("/api/orders", json=body).status_code

        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            codes = Counter(pool.map(submit, ids))
        if codes.get(202, 0) != len(ids):
            console.print(f"[red]submissions answered {dict(codes)}[/red]")
            return 1
        orders: dict[str, dict[str, Any]] = {i: {"processState": "Pending"} for i in ids}
        with Live(progress_table(orders, 0, len(ids)), console=console, refresh_per_second=4) as live:
            while time.monotonic() - started < args.timeout:
                pending = [i for i, o in orders.items() if o["processState"] not in TERMINAL]
                if not pending:
                    break
                with ThreadPoolExecutor(8) as pool:
                    for order_id, reply in zip(
                        pending, pool.map(lambda i: api.get(f"/api/orders/{i}"), pending), strict=True
                    ):
                        if reply.status_code == 200:
                            orders[order_id] = reply.json()
                live.update(progress_table(orders, time.monotonic() - started, len(ids)))
                time.sleep(0.5)  # a progress display refreshes on a period
        elapsed = time.monotonic() - started
        return summarize(orders, sims.get("/ledger").json(), elapsed)
    finally:
        api.close()
        sims.close()
        devhost.stop()


def summarize(orders: dict[str, dict[str, Any]], ledger: dict[str, Any], elapsed: float) -> int:
    counts = Counter(o["processState"] for o in orders.values())
    lost = [i for i, o in orders.items() if o["processState"] not in TERMINAL]
    finished = [_seconds(o) for o in orders.values() if o["processState"] in TERMINAL and "createdAt" in o]
    table = Table(title="summary")
    table.add_column("")
    table.add_column("value", justify="right")
    for state in TERMINAL:
        table.add_row(state, str(counts.get(state, 0)))
    table.add_row("not terminal (lost)", str(len(lost)))
    if finished:
        ordered = sorted(finished)
        # Submission (createdAt) to the terminal transition (updatedAt), both written by the workers.
        table.add_row("latency p50, submission to terminal", f"{statistics.median(ordered):.2f} s")
        table.add_row("latency p95", f"{ordered[max(int(len(ordered) * 0.95) - 1, 0)]:.2f} s")
    table.add_row("wall time", f"{elapsed:.1f} s")
    console.print(table)
    problems = check_ledger(orders, ledger)
    if problems:
        console.print("[red]ledger check failed:[/red]")
        for problem in problems[:20]:
            console.print(f"  {problem}")
    else:
        console.print(
            "[green]ledger check passed[/green]: every Processed order applied exactly once per step, "
            "every Compensated order's applied steps compensated"
        )
    if lost:
        console.print(f"[red]{len(lost)} orders did not reach a terminal state[/red]: {lost[:10]}")
    return 1 if lost or problems else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m devhost.demo``."""
    args = parse_args(argv)
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        return run(args, args.data_dir.resolve())
    with tempfile.TemporaryDirectory(prefix="orders-demo-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
