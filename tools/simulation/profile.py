"""What one seeded run simulates: its load, its faults and the engine's settings, all drawn from the seed.

Seeds spread over the space on purpose: some runs are calm, some have every fault at once, some have long
outages of one service (breakers open and re-open, the Supervisor holds work), some tight budgets (the
Supervisor races the Scheduler), some many operator actions. A seed names one point of that space, so a
failure is reproduced by its seed alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from engine.workflow import WorkflowCatalog, WorkflowDefinition


@dataclass(frozen=True)
class Outage:
    """A remote service down from ``start`` to ``end`` (virtual seconds): every call fails fast, or hangs
    until its timeout."""

    service: str
    start: float
    end: float
    hangs: bool


@dataclass(frozen=True)
class Profile:
    """One run's parameters."""

    seed: int
    orders: int
    arrival_seconds: float  # orders arrive (and faults happen) during this many virtual seconds
    workers: int  # processes; each hosts every function (HTTP, Scheduler, Agents, timers)
    # every request a process makes (a table, the broker, a remote call) may
    crash_rate: float  # ... kill the process (before or after the request takes effect)
    store_error_rate: float  # ... fail (before or after it took effect: the answer is lost)
    latency_spike_rate: float  # ... take 0.2-2 s instead of milliseconds
    restart_seconds: float  # a killed process comes back after up to this long
    # the broker
    delivery_delay_seconds: float  # a message becomes receivable after up to this long (reordering)
    settle_loss_rate: float  # a completion that fails: the message comes back after its lock expires
    lock_loss_rate: float  # a lock renewal that fails: the message is redelivered while still running
    poison_rate: float  # per order: a malformed message sent to a Scheduler queue
    # the remote services: per call
    transient_rate: float
    permanent_rate: float  # per idempotency key, decided at its first call
    hang_rate: float
    lost_reply_rate: float
    slow_rate: float  # the call outlasts its timeout; the service still applies it, a little later
    latency_seconds: float  # mean service latency
    compensation_reject_rate: float  # per key: an undo the service refuses until an operator fixes it
    outages: tuple[Outage, ...]
    # people
    resubmit_rate: float  # per order: the client submits it again later (same body, or another)
    operator_actions: int  # operator actions spread over the run
    cancel_rate: float  # per order: the application cancels it
    # the engine's settings
    complete_by_seconds: float
    sweep_seconds: float
    max_failures: int
    backoff_base_seconds: float
    backoff_max_seconds: float
    cancel_grace_seconds: float
    breaker_reset_seconds: float
    breaker_fail_max: int
    retention_seconds: float
    overlapping_sweeps: float  # chance that a second Supervisor sweeps at the same time
    # waits (drawn after everything else, so a seed draws what it drew before waits came)
    timer_seconds: float = 0.0  # a timer's duration where it names a setting (0: ends at once)
    approval_seconds: float = 1.0  # an approval's deadline where it names a setting
    wake_early_rate: float = 0.0  # a timer's wake-up delivered a little before its time ...
    wake_early_seconds: float = 0.0  # ... by up to this much (the broker's clock is not the processes')
    wake_late_rate: float = 0.0  # a wake-up delivered late, up to two budgets (it races the Supervisor's)
    # services that answer later (a resource declared asynchronous; drawn after the waits, so a seed draws
    # what it drew before callbacks came): not faults, what such a service does ...
    async_rate: float = 0.0  # the share of its calls (applies and undos) it answers 202 Accepted
    decide_seconds: float = 0.0  # how long it takes to decide a call it accepted, at most
    # ... and faults, while they last: a decision that takes one to three budgets, and its callbacks
    slow_decision_rate: float = 0.0
    callback_lost_rate: float = 0.0  # never sent
    callback_duplicate_rate: float = 0.0  # sent twice
    callback_late_rate: float = 0.0  # sent half a budget to two budgets late (after the Supervisor came)
    callback_forged_rate: float = 0.0  # a forged copy (signed with another secret) is sent as well
    # parking (drawn last, so a seed draws what it drew before parking came): the Supervisor's horizon H
    # (``EngineSettings.park_horizon_seconds``; 0 never parks), used only on a catalog that has waits
    park_horizon_seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def late_apply_seconds(self) -> float:
        """How long after its caller gave up a slow call may still land at the service: the network's
        bound, which the engine's cancel grace must cover (a model assumption, see docs/simulation.md)."""
        return self.cancel_grace_seconds / 2

    def describe(self) -> str:
        """One line for the run's report."""
        return (
            f"orders={self.orders} workers={self.workers} crash={self.crash_rate:.3f} "
            f"storeErr={self.store_error_rate:.3f} transient={self.transient_rate:.2f} "
            f"permanent={self.permanent_rate:.2f} hang={self.hang_rate:.2f} lost={self.lost_reply_rate:.2f} "
            f"slow={self.slow_rate:.2f} outages={len(self.outages)} operator={self.operator_actions} "
            f"completeBy={self.complete_by_seconds:g}s sweep={self.sweep_seconds:g}s "
            f"timer={self.timer_seconds:g}s approval={self.approval_seconds:g}s "
            f"async={self.async_rate:g} decide={self.decide_seconds:g}s "
            f"callbacks(lost={self.callback_lost_rate:.2f} twice={self.callback_duplicate_rate:.2f} "
            f"late={self.callback_late_rate:.2f} slow={self.slow_decision_rate:.2f}) "
            f"parkHorizon={self.park_horizon_seconds:g}s"
        )


def _pick(rng: random.Random, *choices: float) -> float:
    return choices[rng.randrange(len(choices))]


def draw(seed: int, services: list[str], orders: int | None = None, max_orders: int | None = None) -> Profile:
    """The profile of ``seed``: the same seed always gives the same profile. ``orders`` replaces the
    seed's number of orders; ``max_orders`` caps it."""
    rng = random.Random(f"profile:{seed}")
    mood = rng.random()
    calm = mood < 0.15
    storm = mood > 0.8
    drawn = rng.choice((200, 400, 800, 1000, 1500))  # drawn even when replaced: the rest stays the same
    n = orders if orders is not None else drawn
    if max_orders is not None:
        n = min(n, max_orders)
    arrival = n / _pick(rng, 5, 20, 50, 100)
    complete_by = _pick(rng, 2.0, 5.0, 10.0, 30.0)
    reset = _pick(rng, 2.0, 5.0, 10.0)

    def rate(low: float, high: float) -> float:
        if calm:
            return 0.0
        value = rng.uniform(low, high)
        return value * 2 if storm else value

    outages: list[Outage] = []
    if not calm and rng.random() < 0.6:
        for _ in range(rng.randint(1, 3)):
            start = rng.uniform(0, arrival)
            length = rng.choice((reset * 0.5, reset * 2, reset * 6, complete_by * 4, arrival / 3))
            outages.append(Outage(rng.choice(services), start, start + length, rng.random() < 0.3))
    return Profile(
        seed=seed,
        orders=n,
        arrival_seconds=arrival,
        workers=rng.randint(2, 4),
        crash_rate=rate(0.0, 0.006),
        store_error_rate=rate(0.0, 0.006),
        latency_spike_rate=rate(0.0, 0.01),
        restart_seconds=_pick(rng, 0.5, 3.0, 10.0),
        delivery_delay_seconds=_pick(rng, 0.01, 0.1, 1.0),
        settle_loss_rate=rate(0.0, 0.01),
        lock_loss_rate=rate(0.0, 0.005),
        poison_rate=rate(0.0, 0.01),
        transient_rate=rate(0.0, 0.2),
        permanent_rate=rate(0.0, 0.05),
        hang_rate=rate(0.0, 0.02),
        lost_reply_rate=rate(0.0, 0.05),
        slow_rate=rate(0.0, 0.02),
        latency_seconds=_pick(rng, 0.005, 0.02, 0.1, 0.5),
        compensation_reject_rate=rate(0.0, 0.02),
        outages=tuple(outages),
        resubmit_rate=rate(0.0, 0.05),
        operator_actions=0 if calm else int(n * rng.choice((0.0, 0.01, 0.05, 0.2))),
        cancel_rate=rate(0.0, 0.03),
        complete_by_seconds=complete_by,
        sweep_seconds=_pick(rng, 0.5, 1.0, 5.0, 10.0),
        max_failures=rng.randint(2, 4),
        backoff_base_seconds=_pick(rng, 1.0, 2.0),
        backoff_max_seconds=_pick(rng, 5.0, 60.0),
        cancel_grace_seconds=1.0,
        breaker_reset_seconds=reset,
        breaker_fail_max=rng.randint(2, 6),
        retention_seconds=_pick(rng, 30.0, 120.0, 600.0),
        overlapping_sweeps=_pick(rng, 0.0, 0.1, 0.5),
        # On the scale of the budget: a window a person (or the application) may cancel in, sometimes none;
        # a review deadline that some approvals beat and some miss.
        timer_seconds=complete_by * _pick(rng, 0.0, 0.5, 1.0, 3.0),
        approval_seconds=complete_by * _pick(rng, 0.5, 1.0, 2.0),
        wake_early_rate=rate(0.0, 0.3),
        wake_early_seconds=_pick(rng, 0.01, 0.2, 1.0),
        wake_late_rate=rate(0.0, 0.1),
        # A service that answers later answers most calls so, and decides within part of the budget; under
        # faults some decisions take longer than the budget, and its callbacks are lost, sent twice or late.
        async_rate=_pick(rng, 0.3, 0.7, 1.0),
        decide_seconds=complete_by * _pick(rng, 0.05, 0.2, 0.4),
        slow_decision_rate=rate(0.0, 0.1),
        callback_lost_rate=rate(0.0, 0.15),
        callback_duplicate_rate=rate(0.0, 0.15),
        callback_late_rate=rate(0.0, 0.15),
        callback_forged_rate=rate(0.0, 0.03),
        # Parking: an order that waits more than two horizons is moved out of the live records until the
        # calendar brings it back (sometimes never: the runs without parking stay covered).
        park_horizon_seconds=complete_by * _pick(rng, 0.0, 0.1, 0.25),
    )


def with_breakers(base: WorkflowCatalog, profile: Profile) -> WorkflowCatalog:
    """The declared workflows with this run's breaker settings (as BREAKER_RESET_SECONDS does)."""

    def adjust(workflow: WorkflowDefinition) -> WorkflowDefinition:
        steps = tuple(
            step.model_copy(
                update={
                    "retry": step.retry.model_copy(
                        update={
                            "breaker_reset_seconds": profile.breaker_reset_seconds,
                            "breaker_fail_max": profile.breaker_fail_max,
                        }
                    )
                }
            )
            for step in workflow.steps
        )
        return workflow.model_copy(update={"steps": steps})

    # The catalog's own class: a release's beside this one (simulation.beside) keeps its own.
    return type(base)(workflows=tuple(adjust(w) for w in base.workflows))
