"""A service outage through the whole local stack: the shared breaker opens for both workers, the
Supervisor holds the orders instead of failing them, and everything finishes once the service is back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import MIDDLE_STEP, SERVICES, LocalStack, start_stack, stop_stack
from tests.support import wait_for

# Long enough to watch an open interval on a busy machine; the other timings stay short (FAST_SETTINGS):
# three timeouts of a 3 s step with at most 1 s of backoff would put an order in Error within ~12 s.
RESET_SECONDS = 8
OUTAGE_SECONDS = 30
ORDERS = 6
BREAKER_FIELDS = ["service", "state", "consecutiveFailures", "openedAt", "openUntil", "probeBy", "updatedAt"]
# The service that goes down (a step of every order runs on it), and one that stays up.
DOWN = MIDDLE_STEP.agent
UP = next(service for service in SERVICES if service != DOWN)


@pytest.fixture(scope="module")
def outage_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Two workers, so two processes share (or would not share) each breaker."""
    running = start_stack(
        tmp_path_factory.mktemp("breakers"),
        workers=2,
        extra_env={"BREAKER_RESET_SECONDS": str(RESET_SECONDS)},
    )
    try:
        yield running
    finally:
        stop_stack(running)


def breakers(stack: LocalStack) -> dict[str, dict[str, Any]]:
    response = stack.api.get("/api/breakers")
    assert response.status_code == 200, response.text
    items = response.json()["breakers"]
    assert list(response.json()) == ["breakers"]
    assert [b["service"] for b in items] == list(SERVICES)
    assert all(list(b) == BREAKER_FIELDS for b in items), items
    return {b["service"]: b for b in items}


def calls_to_the_service_down(stack: LocalStack) -> int:
    return int(stack.simulators.get("/stats").json()[DOWN]["calls"])


def seconds_until(stamp: str) -> float:
    return (datetime.fromisoformat(stamp) - datetime.now(UTC)).total_seconds()


def test_an_outage_opens_the_shared_breaker_holds_orders_and_all_finish_when_it_ends(
    outage_stack: LocalStack,
) -> None:
    stack = outage_stack
    assert len(stack.state["workers"]) == 2
    assert all(b["state"] == "closed" and b["updatedAt"] is None for b in breakers(stack).values())
    stack.faults(**{DOWN: {"transientRate": 1}})
    started = datetime.now(UTC)
    ids = [stack.submit() for _ in range(ORDERS)]

    seen_held: set[str] = set()  # orders the API showed with heldUntil

    def no_order_in_error() -> None:
        for order_id in ids:
            order = stack.order(order_id)
            assert order["processState"] != "Error", order
            if order["heldUntil"] is not None:
                assert order["heldUntil"] == order["completeBy"], order
                seen_held.add(order_id)

    def open_for_a_while() -> dict[str, Any] | None:
        b = breakers(stack)[DOWN]
        return b if b["state"] == "open" and seconds_until(b["openUntil"]) > 5 else None

    opened = wait_for(
        open_for_a_while,
        timeout=60,
        interval=0.2,
        what=f"the {DOWN} breaker to be open with a few seconds to go",
    )
    assert opened["openedAt"].endswith("Z") and opened["consecutiveFailures"] >= 1
    # While it stays open, neither worker calls the service: their cached views refresh within a second
    # (three here, for a busy machine), and a worker that still calls opens it itself after a few failures.
    wait_for(lambda: seconds_until(opened["openUntil"]) < RESET_SECONDS - 3, timeout=10, interval=0.1)
    calls = calls_to_the_service_down(stack)
    wait_for(lambda: seconds_until(opened["openUntil"]) < 0.5, timeout=10, interval=0.1)
    assert calls_to_the_service_down(stack) == calls, "a worker called the service while its breaker was open"
    assert breakers(stack)[DOWN]["openUntil"] == opened["openUntil"]  # the same open interval

    # The outage outlasts what the Supervisor's failure count would allow; nobody goes to Error.
    def outage_over() -> bool:
        no_order_in_error()
        return (datetime.now(UTC) - started).total_seconds() >= OUTAGE_SECONDS

    wait_for(outage_over, timeout=OUTAGE_SECONDS + 60, interval=0.5, what="the outage to last")
    held = sum(int(line.split("held=")[1].split()[0]) for line in _sweep_lines(stack))
    assert held > 0, "the Supervisor never held an order"
    assert seen_held, "no order showed heldUntil while it was held"
    stack.clear_faults()
    for order_id in ids:
        order = stack.wait_terminal(order_id, timeout=120)
        assert order["processState"] == "Processed", order
        assert order["failureCount"] < 3, order
    closed = wait_for(
        lambda: (b := breakers(stack)[DOWN])["state"] == "closed" and b,
        timeout=30,
        interval=0.2,
        what=f"the {DOWN} breaker to close",
    )
    assert closed["openUntil"] is None and closed["updatedAt"] is not None
    assert breakers(stack)[UP]["state"] == "closed"


def _sweep_lines(stack: LocalStack) -> list[str]:
    return [line for line in stack.all_worker_logs().splitlines() if "SupervisorSweepCompleted" in line]
