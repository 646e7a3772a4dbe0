"""The circuit breaker's states, with a manual monotonic clock."""

from __future__ import annotations

import pytest

from engine.breaker import BreakerState, CircuitBreaker, CircuitOpenError


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(fail_max=3, reset_seconds=10, monotonic=Ticks())
    for _ in range(2):
        breaker.before_call()
        breaker.on_failure()
    breaker.before_call()
    breaker.on_success()
    for _ in range(2):
        breaker.before_call()
        breaker.on_failure()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_call()
    breaker.on_failure()
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpenError):
        breaker.before_call()


def test_half_open_allows_one_trial_that_closes_or_reopens() -> None:
    ticks = Ticks()
    breaker = CircuitBreaker(fail_max=1, reset_seconds=10, monotonic=ticks)
    breaker.before_call()
    breaker.on_failure()
    ticks.now = 10
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()
    with pytest.raises(CircuitOpenError):
        breaker.before_call()  # only one trial at a time
    breaker.on_failure()
    assert breaker.state is BreakerState.OPEN
    ticks.now = 20
    breaker.before_call()
    breaker.on_success()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_call()


def test_a_rejected_request_does_not_count_against_the_service() -> None:
    breaker = CircuitBreaker(fail_max=2, reset_seconds=10, monotonic=Ticks())
    for _ in range(5):
        breaker.before_call()
        breaker.on_neutral()
    assert breaker.state is BreakerState.CLOSED


def test_a_cancelled_trial_call_frees_the_trial_slot() -> None:
    ticks = Ticks()
    breaker = CircuitBreaker(fail_max=1, reset_seconds=10, monotonic=ticks)
    breaker.before_call()
    breaker.on_failure()
    ticks.now = 10
    breaker.before_call()  # the half-open trial
    with pytest.raises(CircuitOpenError):
        breaker.before_call()  # only one trial at a time
    breaker.on_abandoned()  # the trial was cancelled (the worker stopped): it told nothing
    breaker.before_call()  # another trial may go
    assert breaker.state is BreakerState.HALF_OPEN
