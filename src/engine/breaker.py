"""A circuit breaker that never holds its lock while the protected call runs.

pybreaker 1.4 runs every call inside its lock, which serialises all calls to one remote service: a
single hung call then blocks every other order's call to that service until it times out. Here the
lock guards only the state; calls run concurrently. The lock is never held across an ``await`` (no method
here awaits), so it is safe on an event loop too: it is only ever held for a few instructions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum

from .errors import CircuitOpenError


class BreakerState(StrEnum):
    """Closed: calls flow. Open: calls fail fast. Half-open: one trial call decides."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    """Opens after ``fail_max`` consecutive failures; after ``reset_seconds`` lets one trial call through."""

    def __init__(
        self, fail_max: int, reset_seconds: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.fail_max = fail_max
        self.reset_seconds = reset_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial_running = False

    @property
    def state(self) -> BreakerState:
        """The current state (an open breaker past its reset time reports half-open)."""
        with self._lock:
            if self._state is BreakerState.OPEN and self._monotonic() - self._opened_at >= self.reset_seconds:
                return BreakerState.HALF_OPEN
            return self._state

    def before_call(self) -> None:
        """Raise :class:`CircuitOpenError` unless a call may be made now."""
        with self._lock:
            if self._state is BreakerState.OPEN:
                if self._monotonic() - self._opened_at < self.reset_seconds:
                    raise CircuitOpenError("circuit open: the service failed repeatedly")
                self._state = BreakerState.HALF_OPEN
                self._trial_running = False
            if self._state is BreakerState.HALF_OPEN:
                if self._trial_running:
                    raise CircuitOpenError("circuit half-open: a trial call is in progress")
                self._trial_running = True

    def on_success(self) -> None:
        """The call worked: close the breaker."""
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._trial_running = False

    def on_failure(self) -> None:
        """The call failed in a way that counts against the service."""
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.fail_max:
                self._state = BreakerState.OPEN
                self._opened_at = self._monotonic()
            self._trial_running = False

    def on_neutral(self) -> None:
        """The call ended in a way that says nothing about the service's health (a rejected request)."""
        with self._lock:
            if self._state is BreakerState.HALF_OPEN:
                self._state = BreakerState.CLOSED
                self._failures = 0
            self._trial_running = False

    def on_abandoned(self) -> None:
        """The call was cancelled before it ended: nothing learned, but a trial slot it held is free."""
        with self._lock:
            self._trial_running = False
