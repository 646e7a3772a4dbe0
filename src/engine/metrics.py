"""Metrics an operator can chart (OpenTelemetry instruments; no-ops until a meter provider is set).

The names are the workbook's (infra/app/workbook.json) and the local files' (orders-devhost): a test
checks they agree. Each process counts what it did; a chart sums over processes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

METER_NAME = "engine"

STATE_ENTERED = "orders.state.entered"
STEP_DURATION = "orders.step.duration"
STEP_RETRIES = "orders.step.retries"
STEP_COMPENSATIONS = "orders.step.compensations"
BREAKER_STATE = "orders.breaker.state"
QUEUE_MESSAGES = "orders.queue.messages"
QUEUE_AGE = "orders.queue.age"
QUEUE_DEAD_LETTERS = "orders.queue.dead_letters"
WAITING = "orders.waiting"
SWEEP_DURATION = "orders.supervisor.sweep.duration"
METRIC_NAMES = (
    STATE_ENTERED,
    STEP_DURATION,
    STEP_RETRIES,
    STEP_COMPENSATIONS,
    BREAKER_STATE,
    QUEUE_MESSAGES,
    QUEUE_AGE,
    QUEUE_DEAD_LETTERS,
    WAITING,
    SWEEP_DURATION,
)

# How a dispatch ended, as its step's record says (engine.calls), and as the duration's outcome.
_ENDINGS = {"succeeded": "succeeded", "failed": "failed", "timed out": "timeout"}

# The breaker's state as a number a chart can draw.
BREAKER_LEVELS = {"closed": 0, "half-open": 1, "open": 2}

_meter = metrics.get_meter(METER_NAME)
_state_entered = _meter.create_counter(STATE_ENTERED, "{order}", "orders entering each ProcessState")
# Bounds in seconds (the SDK's defaults suit milliseconds): from a quick call to a step's whole time.
_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]
_step_duration = _meter.create_histogram(
    STEP_DURATION,
    "s",
    "one attempt of a step, from its dispatch to its end, by outcome",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
_step_retries = _meter.create_counter(
    STEP_RETRIES,
    "{retry}",
    "a step tried again: by its Agent (an HTTP re-try) or the Supervisor (a re-dispatch)",
)
_step_compensations = _meter.create_counter(STEP_COMPENSATIONS, "{step}", "steps undone")


class _Fresh:
    """A gauge that reports each series only in the collection after it was measured.

    A synchronous gauge repeats a process's last value, stamped anew, at every export for as long as the
    process lives: a process that stopped measuring (its sweeps now run elsewhere) would keep reporting a
    queue's depth of an hour ago as current. An observable gauge reports what its callback returns, and
    this one returns only what was measured since it was last asked.
    """

    def __init__(self, name: str, unit: str, description: str) -> None:
        self._measured: dict[tuple[tuple[str, str], ...], float] = {}
        self._lock = threading.Lock()  # the metric reader collects on its own thread
        _meter.create_observable_gauge(name, [self._collect], unit, description)

    def set(self, value: float, attributes: dict[str, str]) -> None:
        """Measured now."""
        with self._lock:
            self._measured[tuple(sorted(attributes.items()))] = value

    def _collect(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            measured, self._measured = self._measured, {}
        return [Observation(value, dict(key)) for key, value in measured.items()]


_breaker_state = _Fresh(BREAKER_STATE, "1", "each service's circuit breaker: 0 closed, 1 half-open, 2 open")
_queue_messages = _Fresh(QUEUE_MESSAGES, "{message}", "active messages waiting on each queue")
_queue_age = _Fresh(QUEUE_AGE, "s", "age of the oldest active message on each queue")
_queue_dead_letters = _Fresh(QUEUE_DEAD_LETTERS, "{message}", "dead-lettered messages on each queue")
_waiting = _Fresh(WAITING, "{order}", "orders waiting, by what they wait for")
_sweep_duration = _meter.create_histogram(
    SWEEP_DURATION, "s", "one Supervisor sweep", explicit_bucket_boundaries_advisory=_SECONDS
)


_enabled = False


def enable() -> None:
    """Measure from now on (once a meter provider is set). Until then every function here returns at once:
    nothing is recorded, not even into a provider another part of the process set (a test's), whose
    exemplar sampling would draw from the ``random`` module that the simulation seeds for its runs."""
    global _enabled
    _enabled = True


def enabled() -> bool:
    """Whether metrics are measured."""
    return _enabled


def state_entered(workflow: str, state: str) -> None:
    """An order of ``workflow`` entered ``state`` (counted once, by the process whose save made it so)."""
    if not _enabled:
        return
    _state_entered.add(1, {"workflow.name": workflow, "state": state})


def step_ended(workflow: str, step: str, outcome: str, seconds: float) -> None:
    """One attempt of a step ended (``outcome``: succeeded, failed, timeout), ``seconds`` after dispatch."""
    if not _enabled:
        return
    _step_duration.record(
        max(seconds, 0.0), {"workflow.name": workflow, "step.name": step, "outcome": outcome}
    )


def step_retried(workflow: str, step: str, by: str, times: int = 1) -> None:
    """A step was tried again ``times`` times, ``by`` its agent or the supervisor."""
    if _enabled and times > 0:
        _step_retries.add(times, {"workflow.name": workflow, "step.name": step, "by": by})


def step_compensated(workflow: str, step: str) -> None:
    """A step was undone."""
    if not _enabled:
        return
    _step_compensations.add(1, {"workflow.name": workflow, "step.name": step})


def breaker_state(service: str, state: str) -> None:
    """The state a service's breaker was seen in."""
    if not _enabled:
        return
    _breaker_state.set(BREAKER_LEVELS.get(state, 0), {"peer.service": service})


def queue_depth(queue: str, active: int, oldest_seconds: float, dead_letters: int) -> None:
    """What waits on one queue, as a Supervisor sweep found it."""
    if not _enabled:
        return
    attributes = {"queue": queue}
    _queue_messages.set(active, attributes)
    _queue_age.set(max(oldest_seconds, 0.0), attributes)
    _queue_dead_letters.set(dead_letters, attributes)


def waiting(waiting_for: str, count: int) -> None:
    """How many orders wait for ``waiting_for`` (approval, callback, timer), over every workflow: the
    store counts its Waiting orders by what they wait for, not by workflow."""
    if not _enabled:
        return
    _waiting.set(count, {"waiting.for": waiting_for})


def sweep_took(seconds: float) -> None:
    """One Supervisor sweep took ``seconds``."""
    if not _enabled:
        return
    _sweep_duration.record(seconds)


def observe_save(
    workflow: str,
    state_before: str,
    state_after: str,
    steps_before: list[dict[str, Any]],
    steps_after: list[dict[str, Any]],
) -> None:
    """Count what one saved change made so: the state it entered, and each dispatch it ended (its duration
    from the dispatch, by outcome; an undo that succeeded is a compensation). Steps as ``model_dump()``."""
    if not _enabled:
        return
    if state_after != state_before:
        state_entered(workflow, state_after)
    for index, after in enumerate(steps_after):
        before = steps_before[index] if index < len(steps_before) else None
        if after == before:
            continue
        was = {(e["attempt"], e["kind"]): e["outcome"] for e in (before or {}).get("calls") or ()}
        for entry in after.get("calls") or ():
            ending = _ENDINGS.get(entry["outcome"] or "")
            if (
                ending is None
                or entry["kind"] == "wait"
                or was.get((entry["attempt"], entry["kind"])) == entry["outcome"]
            ):
                continue
            end = entry["answered"] or entry["ended"]
            if end is not None:
                step_ended(workflow, after["name"], ending, (end - entry["dispatched"]).total_seconds())
            if entry["kind"] == "undo" and ending == "succeeded":
                step_compensated(workflow, after["name"])
