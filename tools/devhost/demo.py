"""``make demo``: the whole system under a fault profile, with live progress and a ledger check.

It starts orders-devhost on free ports, applies a fault profile to every declared remote service, submits
a batch of orders over HTTP, a mix of the catalog's workflows (``--mix``; by default each workflow an
equal share), each order's input one of its workflow's declared examples in turn, varied (lines dropped,
quantities scaled, as its input model allows) so that each condition's branches occur. It plays the
people the waits wait for: an approver who approves most approvals, rejects some and leaves some to
expire, and customers who cancel some orders inside their cancellation window. It shows per
workflow the counts per ProcessState, retries, Supervisor recoveries and compensations while they run,
then prints a summary per workflow: orders per terminal state, steps left out by their conditions,
latency from submission to the terminal state (p50/p95), what the waits saw, and the ledger check of
:mod:`simulators.ledger_check` (every Processed order's steps applied exactly once and not undone but
those left out, never called; no Compensated order's step left applied but those that cannot be undone,
applied before any undo; every value passed on the one returned). It exits non-zero if an order is lost
or the ledger check fails, and then keeps the run's data folder and names it.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import shutil
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
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.table import Table

from adapters.otlp_file import read_spans, spans_path
from devhost import launch, trace_check, trace_cli
from devhost.stack import local_wait_settings
from engine import APPROVAL, TIMER, WorkflowDefinition
from orders.catalog import CATALOG, SERVICES
from simulators.ledger_check import ledger_report

TERMINAL = ("Processed", "Compensated", "Error")
STATES = ("Pending", "Processing", "Waiting", "Compensating", *TERMINAL)
# What the demo's approver does with each approval it sees, in turn (the rest: approve).
DECISIONS = ("approve", "reject", "approve", "expire", "approve")
CANCEL_IN_WINDOW_EVERY = 4  # one order in this many that reaches a cancellation window is cancelled in it
console = Console()


def parse_mix(text: str) -> dict[str, float]:
    """``NAME=WEIGHT,...`` over the catalog's workflows: the share of the orders each one runs."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        if name not in CATALOG.names:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a workflow of the catalog ({', '.join(CATALOG.names)})"
            )
        try:
            weights[name] = float(weight or "1")
        except ValueError:
            raise argparse.ArgumentTypeError(f"the weight of {name} is not a number: {weight!r}") from None
        if not weights[name] >= 0:
            raise argparse.ArgumentTypeError(f"the weight of {name} must be 0 or more")
    if not sum(weights.values()) > 0:
        raise argparse.ArgumentTypeError("at least one workflow needs a weight above 0")
    return {name: weight for name, weight in weights.items() if weight > 0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    p.add_argument("--orders", type=int, default=100, help="orders to submit (default 100)")
    names = CATALOG.names
    example = f"{names[0]}=3,{names[-1]}=1" if len(names) > 1 else f"{names[0]}=1"
    p.add_argument(
        "--mix",
        type=parse_mix,
        default=",".join(f"{name}=1" for name in names),
        metavar="WORKFLOW=WEIGHT,...",
        help=f"the catalog's workflows the orders run, with their shares, e.g. {example} "
        "(default %(default)s: each an equal share)",
    )
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
    p.add_argument("--window", type=float, default=1.0, help="every timer's setting (default 1)")
    p.add_argument(
        "--review", type=float, default=10.0, help="every approval's deadline setting (default 10)"
    )
    p.add_argument(
        "--park-horizon",
        type=float,
        default=1.0,
        help="WAIT_PARK_HORIZON_SECONDS: waits ending more than twice this far off are parked (default 1)",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for every order (default 600)")
    p.add_argument(
        "--data-dir", type=Path, default=None, help="keep the stack's data here (default: temporary)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the variations of the orders' inputs (default: random)",
    )
    return p.parse_args(argv)


def assign_workflows(count: int, mix: dict[str, float]) -> list[str]:
    """The workflow of each of ``count`` orders: interleaved, each as close to its share as counts allow."""
    total = sum(mix.values())
    given = dict.fromkeys(mix, 0)
    chosen = []
    for index in range(1, count + 1):
        # The workflow furthest behind its share of the orders so far (the first declared on a tie).
        name = max(mix, key=lambda n: mix[n] / total * index - given[n])
        given[name] += 1
        chosen.append(name)
    return chosen


def current(name: str) -> WorkflowDefinition:
    """The latest version of a workflow of the catalog: what a new order of it runs."""
    workflow = CATALOG.current(name)
    if workflow is None:
        raise SystemExit(f"the catalog has no workflow {name}")
    return workflow


def order_inputs(workflows: list[str], rng: random.Random) -> list[dict[str, Any]]:
    """The input of each order: its workflow's declared examples in turn (so every example is submitted
    once there are as many orders as examples), each varied by :func:`vary`."""
    given = dict.fromkeys(workflows, 0)
    inputs = []
    for name in workflows:
        workflow = current(name)
        examples = workflow.examples()
        if not examples:
            raise SystemExit(f"workflow {name} declares no example input to submit")
        inputs.append(vary(examples[given[name] % len(examples)], workflow, rng))
        given[name] += 1
    return inputs


def vary(example: dict[str, Any], workflow: WorkflowDefinition, rng: random.Random) -> dict[str, Any]:
    """``example`` with some of its list's elements dropped and its whole numbers scaled, if the workflow's
    input model takes the result (a few tries), else the example as it is. Knowing nothing of the fields,
    it varies what makes conditions go either way: which lines an order has (e.g. an order with a digital
    line alone), and how many of each."""
    for _ in range(5):
        candidate = _varied(copy.deepcopy(example), rng)
        try:
            if workflow.input is not None:
                workflow.input.model_validate(candidate)
        except ValidationError:
            continue
        return dict(candidate)
    return dict(example)


def _varied(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        return {key: _varied(item, rng) for key, item in value.items()}
    if isinstance(value, list):
        items = [_varied(item, rng) for item in value]
        if len(items) > 1 and rng.random() < 0.5:
            keep = sorted(rng.sample(range(len(items)), rng.randint(1, len(items) - 1)))
            items = [items[index] for index in keep]
        return items
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value * rng.randint(1, 3)
    return value


def start_devhost(args: argparse.Namespace, data_dir: Path) -> launch.RunningDevhost:
    env = {
        "STEP_COMPLETE_BY_SECONDS": str(args.complete_by),
        "SUPERVISOR_SCHEDULE": "*/1 * * * * *",
        "SUPERVISOR_MAX_FAILURES": os.environ.get("SUPERVISOR_MAX_FAILURES", "5"),
        "SUPERVISOR_BACKOFF_SECONDS": "0.5",
        "SUPERVISOR_MAX_BACKOFF_SECONDS": "4",
        **local_wait_settings(timer_seconds=args.window, approval_seconds=args.review),
        "WAIT_PARK_HORIZON_SECONDS": str(args.park_horizon),
    }
    with console.status("starting Azurite, the Service Bus emulator, the simulators and the workers..."):
        try:
            return launch.start(data_dir, workers=args.workers, env=env)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc


def by_workflow(orders: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The orders of each workflow submitted, in the catalog's order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for order in orders.values():
        groups.setdefault(order["workflow"], []).append(order)
    return {name: groups[name] for name in CATALOG.names if name in groups}


def table_columns(orders: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A column per workflow, and one for all the orders when there are several."""
    groups = by_workflow(orders)
    return groups if len(groups) == 1 else {**groups, "all": list(orders.values())}


def progress_table(orders: dict[str, dict[str, Any]], elapsed: float, submitted: int) -> Table:
    """Per workflow, counts per ProcessState, and how much recovery work it took so far."""
    named = table_columns(orders)
    columns = list(named.values())
    table = Table(title=f"{submitted} orders, {elapsed:.0f} s")
    table.add_column("")
    for name in named:
        table.add_column(name, justify="right")
    counts = [Counter(o.get("processState", "Pending") for o in column) for column in columns]
    for state in STATES:
        table.add_row(state, *(str(c.get(state, 0)) for c in counts))

    def steps(column: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for o in column for s in o.get("steps", [])]

    table.add_row(
        "step re-dispatches", *(str(sum(max(s["attempts"] - 1, 0) for s in steps(c))) for c in columns)
    )
    table.add_row("Supervisor recoveries", *(str(sum(o.get("failureCount", 0) for o in c)) for c in columns))
    table.add_row(
        "compensation calls", *(str(sum(s.get("compensationAttempts", 0) for s in steps(c))) for c in columns)
    )
    return table


class People:
    """The people the waits wait for: an approver (approves, rejects, or lets an approval expire, in the
    turn of :data:`DECISIONS`) and customers who cancel an order in its cancellation window now and
    then. Each acts once per order, as an operator would: with the ETag of the order it read."""

    def __init__(self, api: httpx.Client) -> None:
        self.api = api
        self.decided: dict[str, str] = {}  # order id -> approve, reject, expire
        self.cancelled: set[str] = set()
        self.windows: set[str] = set()  # orders seen in a cancellation window
        self.refused: list[str] = []
        self.callbacks: list[tuple[str, str]] = []  # what the services that answer later did

    def act(self, order: dict[str, Any], etag: str | None) -> None:
        """Act on ``order`` (as just read, with its ETag) if it waits for one of them."""
        order_id = order["orderId"]
        if order.get("processState") != "Waiting" or etag is None:
            return
        current = next((s["name"] for s in order["steps"] if s["state"] == "Waiting"), None)
        if order.get("waitingFor") == APPROVAL and order_id not in self.decided and current:
            decision = DECISIONS[len(self.decided) % len(DECISIONS)]
            path = f"/api/orders/{order_id}/steps/{current}/{decision}"
            if decision == "expire" or self._post(path, etag, f"demo: {decision}"):
                self.decided[order_id] = decision  # else it tries again on its next read
        elif order.get("waitingFor") == TIMER and order_id not in self.windows:
            self.windows.add(order_id)
            if len(self.windows) % CANCEL_IN_WINDOW_EVERY == 0:
                path = f"/api/orders/{order_id}/cancel"
                if self._post(path, etag, "demo: the customer changed their mind"):
                    self.cancelled.add(order_id)

    def _post(self, path: str, etag: str, note: str) -> bool:
        response = self.api.post(path, json={"note": note}, headers={"If-Match": etag})
        if response.status_code != 202:  # the order moved on since it was read (its window ended)
            self.refused.append(f"{path}: {response.status_code}")
        return response.status_code == 202

    def rows(self, orders: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
        """What the waits saw, for the summary."""
        decided = Counter(self.decided.values())
        undone = sum(orders[i]["processState"] == "Compensated" for i in self.cancelled if i in orders)
        return [
            ("approvals approved", str(decided["approve"])),
            ("approvals rejected", str(decided["reject"])),
            ("approvals left to expire", str(decided["expire"])),
            ("cancellation windows", str(len(self.windows))),
            ("cancelled in the window", f"{len(self.cancelled)} ({undone} Compensated)"),
            *self.callbacks,
        ]


def callback_rows(stats: dict[str, dict[str, int]]) -> list[tuple[str, str]]:
    """The simulators' counts of calls answered later and of their callbacks, over every service."""
    total = Counter[str]()
    for counts in stats.values():
        total.update({k: v for k, v in counts.items() if k.startswith(("accepted", "callback"))})
    return [
        ("calls answered later (202)", str(total["accepted"])),
        (
            "their callbacks",
            f"{total['callbacks']} sent ({total['callbackDuplicated']} twice, {total['callbackLate']} late), "
            f"{total['callbackLost']} lost",
        ),
    ]


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
            # A resource declared asynchronous (the payment's charges) answers half its calls later by a
            # callback, some of which are lost, sent twice, or sent after the step's CompleteBy.
            "asyncRate": 0.5,
            "callbackDelayMs": 300,
            "callbackLostRate": 0.05,
            "callbackDuplicateRate": 0.1,
            "callbackLateRate": 0.05,
            "callbackLateMs": int(args.complete_by * 1500),
        }
        response = sims.post("/faults", json={service.name: profile for service in SERVICES})
        if response.status_code != 200:
            raise SystemExit(f"the fault profile was refused: {response.text}")
        console.print(f"fault profile on every service ({', '.join(s.name for s in SERVICES)}): {profile}")
        assigned = assign_workflows(args.orders, args.mix)
        inputs = order_inputs(assigned, random.Random(args.seed))
        workflows = {f"demo-{uuid.uuid4().hex[:12]}": workflow for workflow in assigned}
        bodies = {
            order_id: {**given, "orderId": order_id, "workflow": workflow}
            for (order_id, workflow), given in zip(workflows.items(), inputs, strict=True)
        }
        console.print(
            "orders per workflow: "
            + ", ".join(f"{name} {count}" for name, count in Counter(workflows.values()).items())
            + " (inputs: the workflows' declared examples, varied)"
        )

        def submit(order_id: str) -> int:
            response = api.post("/api/orders", json=bodies[order_id])
            if response.status_code != 202:
                console.print(f"[red]{order_id} refused[/red]: {response.text[:300]}")
            return response.status_code

        ids = list(workflows)
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            codes = Counter(pool.map(submit, ids))
        if codes.get(202, 0) != len(ids):
            console.print(f"[red]submissions answered {dict(codes)}[/red]")
            return 1
        orders: dict[str, dict[str, Any]] = {
            i: {"orderId": i, "workflow": workflows[i], "processState": "Pending"} for i in ids
        }
        people = People(api)
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
                            people.act(orders[order_id], reply.headers.get("etag"))
                live.update(progress_table(orders, time.monotonic() - started, len(ids)))
                time.sleep(0.5)  # a progress display refreshes on a period
        elapsed = time.monotonic() - started
        people.callbacks = callback_rows(sims.get("/stats").json())
        code = summarize(orders, sims.get("/ledger").json(), elapsed, people)
        code = code or find_check(api, bodies, orders)
        return code or trace_summary(data_dir, orders, kept=args.data_dir is not None)
    finally:
        api.close()
        sims.close()
        devhost.stop()


def _search(api: httpx.Client, **query: str) -> list[str]:
    """Every order id a search of ``GET /api/orders`` finds, following its pages."""
    found: list[str] = []
    token: str | None = None
    while True:
        params = {**query, "pageSize": "100", **({"continuationToken": token} if token else {})}
        reply = api.get("/api/orders", params=params)
        reply.raise_for_status()
        page = reply.json()
        found += [item["orderId"] for item in page["items"]]
        token = page["continuationToken"]
        if not token:
            return found


def find_check(
    api: httpx.Client, bodies: dict[str, dict[str, Any]], orders: dict[str, dict[str, Any]]
) -> int:
    """Find the orders of the most frequent value of each searchable field, with and without their final
    state, and compare with what the demo submitted; name the slowest order and where its timeline is."""
    fields = sorted({name for workflow in CATALOG.workflows for name in workflow.searchable})
    failed = 0
    for name in fields:
        values = Counter(str(body[name]) for body in bodies.values() if body.get(name) is not None)
        if not values:
            continue
        value, _ = values.most_common(1)[0]
        submitted = {i for i, body in bodies.items() if str(body.get(name)) == value}
        found = _search(api, **{name: value})
        processed = {i for i in submitted if orders[i]["processState"] == "Processed"}
        found_processed = _search(api, **{name: value, "processState": "Processed"})
        ok = sorted(found) == sorted(submitted) and sorted(found_processed) == sorted(processed)
        failed += not ok
        colour = "green" if ok else "red"
        console.print(
            f"[{colour}]find[/{colour}] {name}={value}: {len(found)} orders found ({len(submitted)} "
            f"submitted), {len(found_processed)} of them Processed ({len(processed)})"
        )
    return 1 if failed else 0


def trace_summary(data_dir: Path, orders: dict[str, dict[str, Any]], kept: bool) -> int:
    """Check every order's trace (devhost.trace_check), then name the slowest order, print its trace and
    say how to print it again (``kept``: the data folder outlives the demo)."""
    finished = [o for o in orders.values() if o["processState"] in TERMINAL and "createdAt" in o]
    report = trace_check.wait_and_check(data_dir, finished)
    if report.problems:
        console.print("[red]trace check failed:[/red]")
        for problem in report.problems[:20]:
            console.print(f"  {problem}")
    else:
        console.print(
            f"[green]trace check passed[/green] ({report.summary()}): every order's hops in the one trace "
            "its submission started, each span under the one that caused it, every answered call traced"
        )
    if finished:
        slowest = max(finished, key=_seconds)
        order_id = slowest["orderId"]
        console.print(
            f"slowest order: {order_id} ({_seconds(slowest):.2f} s, {slowest['processState']}); its timeline "
            f"and every call: the console (/api/console) or GET /api/orders/{order_id}; its trace:"
        )
        traces = trace_cli.order_traces(read_spans(spans_path(data_dir)), order_id)
        for line in trace_cli.render_text(traces):
            console.print(line, soft_wrap=True)
        if kept:
            console.print(f"print it again: orders-trace {order_id} --data-dir {data_dir}")
        else:
            console.print(
                "to print a trace after the demo, keep its data: make demo DEMO_ARGS='--data-dir DIR', "
                f"then orders-trace {order_id} --data-dir DIR"
            )
    return 1 if report.problems else 0


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[max(int(len(ordered) * share) - 1, 0)]


def summarize(
    orders: dict[str, dict[str, Any]], ledger: dict[str, Any], elapsed: float, people: People | None = None
) -> int:
    columns = table_columns(orders)
    table = Table(title="summary", caption="latency: submission to terminal state")
    table.add_column("")
    for name in columns:
        table.add_column(name, justify="right")
    counts = {name: Counter(o["processState"] for o in column) for name, column in columns.items()}
    table.add_row("submitted", *(str(len(column)) for column in columns.values()))
    for state in TERMINAL:
        table.add_row(state, *(str(c.get(state, 0)) for c in counts.values()))
    lost = [i for i, o in orders.items() if o["processState"] not in TERMINAL]
    table.add_row(
        "not terminal (lost)",
        *(str(sum(o["processState"] not in TERMINAL for o in column)) for column in columns.values()),
    )
    table.add_row(
        "steps left out",
        *(
            str(sum(s.get("state") == "LeftOut" for o in column for s in o.get("steps", [])))
            for column in columns.values()
        ),
    )
    # Submission (createdAt) to the terminal transition (updatedAt), both written by the workers.
    latencies = {
        name: sorted(_seconds(o) for o in column if o["processState"] in TERMINAL and "createdAt" in o)
        for name, column in columns.items()
    }
    if any(latencies.values()):
        table.add_row(
            "latency p50",
            *(f"{statistics.median(s):.2f} s" if s else "-" for s in latencies.values()),
        )
        table.add_row(
            "latency p95", *(f"{_percentile(s, 0.95):.2f} s" if s else "-" for s in latencies.values())
        )
    table.add_row("wall time", f"{elapsed:.1f} s", *([""] * (len(columns) - 1)))
    console.print(table)
    if people is not None:
        waits = Table(title="waits: the demo's approver and customers")
        waits.add_column("")
        waits.add_column("orders", justify="right")
        for label, value in people.rows(orders):
            waits.add_row(label, value)
        console.print(waits)
        if people.refused:  # the order moved on between the read and the action: nothing was done
            console.print(f"actions refused (the order had moved on): {len(people.refused)}")
    report = ledger_report(orders.values(), ledger)
    problems = report.problems
    if problems:
        console.print("[red]ledger check failed:[/red]")
        for problem in problems[:20]:
            console.print(f"  {problem}")
    else:
        per_workflow = []
        for name, group in by_workflow(orders).items():
            states = Counter(o["processState"] for o in group)
            per_workflow.append(
                f"{name}: {states['Processed']} Processed, {states['Compensated']} Compensated"
            )
        checked = ", ".join(per_workflow)
        console.print(
            f"[green]ledger check passed[/green] ({checked}): every Processed order's steps applied exactly "
            "once under their keys and not undone but those left out by their conditions, never called; no "
            "Compensated order's step left applied but those that cannot be undone, applied before any "
            "undo; every value passed on the one its step returned"
        )
    console.print(f"ledger check: {report.summary()}")
    if lost:
        console.print(f"[red]{len(lost)} orders did not reach a terminal state[/red]: {lost[:10]}")
    return 1 if lost or problems else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m devhost.demo``. Without ``--data-dir`` the stack's data goes to a
    temporary folder, removed after a run that passed and kept, and named, after one that failed (or was
    stopped), so that its ledger, logs, traces and tables can be read."""
    args = parse_args(argv)
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        return run(args, args.data_dir.resolve())
    data_dir = Path(tempfile.mkdtemp(prefix="orders-demo-"))
    code = 1
    try:
        code = run(args, data_dir)
    finally:
        if code == 0:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            console.print(
                f"[red]the run failed[/red]; its data is kept in {data_dir} (the simulators' ledger, the "
                f"processes' logs, the traces, Azurite's tables): orders-trace ORDER_ID --data-dir {data_dir}"
            )
    return code


if __name__ == "__main__":
    sys.exit(main())
