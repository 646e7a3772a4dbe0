"""Submit a few orders to a running deployment and follow each one until it is Processed.

Meant to run right after ``azd deploy`` (the ``postdeploy`` hook in azure.yaml) or by hand against any
deployment or the local stack. Everything goes through the public HTTP API; nothing is read from the
state store or the queues, so it checks what a client would see. Each order is the first declared example
of the default workflow (the one an order that names none runs), so it fits whatever input that workflow
declares.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orders.catalog import CATALOG

EXIT_OK = 0
EXIT_NOT_PROCESSED = 1
EXIT_USAGE = 2  # argparse's own code for a bad command line
EXIT_API_ERROR = 3

KEY_VARIABLE = "ORDERS_SMOKE_KEY"

TERMINAL = frozenset({"Processed", "Compensated", "Error"})
# A fresh deployment's host may still be starting: these answers to the health check are retried.
_NOT_READY = frozenset({404, 500, 502, 503, 504})

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """The API answered something the contract does not allow, or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status when the status itself was wrong


# ---- the API's answers, as far as the check relies on them ---------------------------------------
class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class Health(_Wire):
    """``GET /api/health``."""

    status: Literal["ok"]


class Accepted(_Wire):
    """``POST /api/orders`` → 202."""

    order_id: str = Field(alias="orderId")
    process_state: str = Field(alias="processState")
    status_url: str = Field(alias="statusUrl")


class StepView(_Wire):
    """One step of ``GET /api/orders/{orderId}``."""

    name: str
    state: str
    attempts: int


class OrderView(_Wire):
    """``GET /api/orders/{orderId}`` → 200."""

    order_id: str = Field(alias="orderId")
    process_state: str = Field(alias="processState")
    failure_count: int = Field(alias="failureCount")
    last_error: str | None = Field(alias="lastError")
    steps: list[StepView]


@dataclass
class Outcome:
    """How one order ended (or where it stood when time ran out)."""

    order_id: str
    state: str
    seconds: float
    steps: str
    last_error: str | None = None

    @property
    def passed(self) -> bool:
        """Only Processed counts."""
        return self.state == "Processed"


# ---- HTTP ------------------------------------------------------------------------------------------
class SmokeClient:
    """The few calls the check makes, each validated against the API contract."""

    def __init__(self, base_url: str, key: str | None, request_timeout: float = 10.0) -> None:
        headers = {"x-functions-key": key} if key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=request_timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def health(self) -> Health:
        """``GET /api/health``; raises ApiError unless it answers 200 ``{"status": "ok"}``."""
        return self._call("GET", "/api/health", 200, Health)

    def submit(self, order_id: str) -> Accepted:
        """Submit one order with a fresh id (see :func:`order_body`); it must be accepted as new: Processing
        (claimed at its submission) or Pending (a Scheduler kicked instead)."""
        body = order_body(order_id)
        accepted = self._call("POST", "/api/orders", 202, Accepted, json=body)
        if accepted.order_id != order_id:
            raise ApiError(f"POST /api/orders answered for order {accepted.order_id!r}, not {order_id!r}")
        if accepted.process_state not in ("Processing", "Pending"):
            raise ApiError(
                f"a new order {order_id} is {accepted.process_state}, expected Processing or Pending"
            )
        return accepted

    def order(self, order_id: str) -> OrderView:
        """``GET /api/orders/{orderId}``."""
        view = self._call("GET", f"/api/orders/{order_id}", 200, OrderView)
        if view.order_id != order_id:
            raise ApiError(f"GET /api/orders/{order_id} answered for order {view.order_id!r}")
        return view

    def _call(self, method: str, path: str, expected: int, model: type[M], **kwargs: Any) -> M:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != expected:
            raise ApiError(
                f"{method} {path}: HTTP {response.status_code}, expected {expected}: {response.text[:200]!r}",
                status=response.status_code,
            )
        try:
            payload = response.json()
        except ValueError as exc:
            raise ApiError(f"{method} {path}: the body is not JSON: {response.text[:200]!r}") from exc
        try:
            return model.model_validate(payload)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ApiError(f"{method} {path}: unexpected body ({problems})") from exc


def order_body(order_id: str) -> dict[str, Any]:
    """The body of a smoke order: the default workflow's first declared example, naming no workflow."""
    workflow = CATALOG.current(CATALOG.default)
    examples = workflow.examples() if workflow is not None else []
    if not examples:
        raise ApiError(f"workflow {CATALOG.default} declares no example input to submit")
    return {**examples[0], "orderId": order_id}


def wait_until_healthy(client: SmokeClient, timeout: float, interval: float) -> None:
    """Poll the health check while the host starts; raise ApiError on a wrong answer or at ``timeout``.

    Connection errors and 404/5xx are what a host that is still starting answers, so they are retried;
    anything else (a 200 with the wrong body, a 401) is wrong at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.health()
            return
        except ApiError as exc:
            retryable = isinstance(exc.__cause__, httpx.TransportError) or exc.status in _NOT_READY
            if not retryable or time.monotonic() >= deadline:
                raise ApiError(f"the health check failed: {exc}") from exc
        time.sleep(interval)  # waiting for a remote host to start: there is nothing to wait on


def follow(
    client: SmokeClient, submitted: dict[str, float], timeout: float, interval: float
) -> list[Outcome]:
    """Poll every order until it is terminal or ``timeout`` seconds have passed since the last submit."""
    deadline = time.monotonic() + timeout
    latest: dict[str, OrderView] = {}
    done: dict[str, Outcome] = {}
    while True:
        for order_id, started in submitted.items():
            if order_id in done:
                continue
            view = client.order(order_id)
            latest[order_id] = view
            if view.process_state in TERMINAL:
                done[order_id] = _outcome(view, time.monotonic() - started)
        if len(done) == len(submitted) or time.monotonic() >= deadline:
            break
        time.sleep(interval)  # polling the remote API at a fixed pace
    now = time.monotonic()
    return [
        done.get(order_id) or _outcome(latest[order_id], now - started, timed_out=True)
        for order_id, started in submitted.items()
    ]


def _outcome(view: OrderView, seconds: float, timed_out: bool = False) -> Outcome:
    steps = ", ".join(f"{s.name}={s.state}" for s in view.steps)
    state = f"{view.process_state} (timed out)" if timed_out else view.process_state
    return Outcome(view.order_id, state, seconds, steps, view.last_error)


# ---- output ----------------------------------------------------------------------------------------
def print_summary(outcomes: Sequence[Outcome], out: TextIO) -> None:
    """A plain table: one line per order, then the verdict."""
    rows = [("order", "state", "seconds", "steps")]
    rows += [(o.order_id, o.state, f"{o.seconds:.1f}", o.steps) for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)),
            row[3],
            file=out,
        )
    for outcome in outcomes:
        if outcome.last_error:
            print(f"{outcome.order_id}: last error: {outcome.last_error}", file=out)
    passed = sum(o.passed for o in outcomes)
    verdict = "PASSED" if passed == len(outcomes) else "FAILED"
    print(f"smoke test {verdict}: {passed}/{len(outcomes)} orders Processed", file=out)


# ---- command line ----------------------------------------------------------------------------------
def _base_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text.rstrip("/")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _order_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 100")
    return int(text)


def parser() -> argparse.ArgumentParser:
    """The command line of ``orders-smoke``."""
    p = argparse.ArgumentParser(
        prog="orders-smoke",
        description=(
            "Check a deployment end to end: wait for GET /api/health, submit N orders (each the\n"
            "default workflow's first declared example) with POST /api/orders and poll\n"
            "GET /api/orders/{id} until each is Processed."
        ),
        epilog=(
            "exit codes:\n"
            "  0  every order reached Processed\n"
            "  1  an order ended otherwise (Compensated, Error) or was not Processed within --timeout\n"
            "  2  bad command line\n"
            "  3  the API misbehaved: unreachable or unhealthy within --ready-timeout, an unexpected\n"
            "     status, a body that is not JSON or lacks a field"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", required=True, type=_base_url, help="base URL of the app, without /api")
    p.add_argument(
        "--key",
        default=os.environ.get(KEY_VARIABLE) or None,
        help=f"function key, sent as the x-functions-key header (default: ${KEY_VARIABLE}, which keeps it "
        "out of the process list)",
    )
    p.add_argument("--orders", type=_order_count, default=3, help="orders to submit (default 3)")
    p.add_argument(
        "--timeout", type=_positive, default=180.0, help="seconds for every order to finish (default 180)"
    )
    p.add_argument(
        "--ready-timeout",
        type=_positive,
        default=120.0,
        help="seconds to wait for the health check while the host starts (default 120)",
    )
    p.add_argument("--interval", type=_positive, default=1.0, help="seconds between polls (default 1)")
    return p


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the check with parsed arguments; return the exit code."""
    client = SmokeClient(args.url, args.key)
    try:
        wait_until_healthy(client, args.ready_timeout, args.interval)
        submitted: dict[str, float] = {}
        for _ in range(args.orders):
            order_id = f"smoke-{uuid.uuid4().hex[:16]}"
            client.submit(order_id)
            submitted[order_id] = time.monotonic()
        outcomes = follow(client, submitted, args.timeout, args.interval)
    except ApiError as exc:
        print(f"smoke test FAILED: {exc}", file=err)
        return EXIT_API_ERROR
    finally:
        client.close()
    print_summary(outcomes, out)
    return EXIT_OK if all(o.passed for o in outcomes) else EXIT_NOT_PROCESSED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``orders-smoke``."""
    args = parser().parse_args(argv)
    return run(args, sys.stdout, sys.stderr)
