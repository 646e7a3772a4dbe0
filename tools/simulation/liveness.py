"""The liveness invariants: what must happen, and by when (see :mod:`simulation.oracle` for the list).

The bounds are derived from the run's settings (:class:`Limits`); the oracle checks them while the run
goes wherever a deadline makes that possible, and :func:`simulation.oracle.settled_liveness` checks what is
left once it has settled, from the oracle's records (never from the tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import isodate

from engine import queues, scheduler
from engine.settings import EngineSettings
from engine.workflow import WorkflowCatalog

from .profile import Profile

# What a sweep costs in the simulated world once the faults stopped (world.py): for each order it comes to,
# at most a load, a read of the history, a save, the watch entry, an alert cleared, and the moves of a
# finished order to the history, each request at most 10 ms; a request sent before the faults stopped may
# still take up to 2 s.
REQUESTS_PER_ORDER = 10
REQUEST_SECONDS = 0.01
SPIKE_SECONDS = 2.0


@dataclass(frozen=True)
class Limits:
    """The run's settings the liveness bounds are made of, in seconds (docs/simulation.md, "The bounds")."""

    complete_by: float  # w: a step's budget (STEP_COMPLETE_BY_SECONDS; no declared step sets its own)
    sweep: float  # s: the Supervisor's timer
    restart: float  # R: the longest a killed process stays down
    max_failures: int  # m: SUPERVISOR_MAX_FAILURES
    backoff: float  # b: the longest backoff the policy gives before Error, after failure m - 1
    breaker: float  # h: the longest a breaker holds work: its open interval or a trial call, and the margin
    grace: float  # g: CANCEL_GRACE_SECONDS, which an undo of a step skipped or cancelled while running waits
    delivery: float  # d: the longest a message takes to become receivable (the broker's delivery delay)
    early: float  # e: how early a Scheduler takes a command before the task's retry time
    lock: float  # l: the queues' lock duration, after which a message a dead process held comes back
    # Not a setting: the longest a sweep may run once the faults stopped, in the simulated world (at most
    # REQUESTS_PER_ORDER requests for each order it comes to, each at most REQUEST_SECONDS, plus a request
    # sent while the faults lasted, whose latency may have spiked).
    sweep_run: float

    @classmethod
    def of(cls, profile: Profile, settings: EngineSettings, catalog: WorkflowCatalog) -> Limits:
        """The limits of a run with these settings on these workflows."""
        steps = [step for workflow in catalog.workflows for step in workflow.steps]
        reset = max(step.retry.breaker_reset_seconds for step in steps)
        probe = max(step.retry.call_timeout_seconds for step in steps)  # an Agent's trial call lasts this
        consumed = [queues.SCHEDULER_QUEUE, queues.REPLY_QUEUE, *map(queues.agent_queue, catalog.agents)]
        lock = max(_seconds(queues.queue_properties(queue).lock_duration) for queue in consumed)
        return cls(
            complete_by=max(step.complete_by_seconds or settings.step_complete_by_seconds for step in steps),
            sweep=profile.sweep_seconds,
            restart=profile.restart_seconds,
            max_failures=settings.supervisor_max_failures,
            backoff=settings.backoff(settings.supervisor_max_failures - 1),
            breaker=max(reset, probe) + settings.hold_margin_seconds,
            grace=settings.cancel_grace_seconds,
            delivery=profile.delivery_delay_seconds,
            early=scheduler._EARLY_TOLERANCE.total_seconds(),
            lock=lock,
            sweep_run=profile.orders * REQUESTS_PER_ORDER * REQUEST_SECONDS + SPIKE_SECONDS,
        )

    def detect(self, slack: float) -> float:
        """From a task's CompleteBy to the Supervisor's recovery of it, at most: the next tick of its timer,
        then the sweep still running at that tick and the sweep that starts after it, each at most
        ``slack`` long (the scheduling slack: the longest a sweep has run since the faults stopped)."""
        return self.sweep + 2 * slack

    def terminal(
        self, start: float, latest: float, phases: int, holds: int, slack: float, waits: float = 0.0
    ) -> float:
        """How long after ``start`` (the faults stopped, or an action on the order was saved since) an order
        must be terminal, its latest CompleteBy then being ``latest``, with ``phases`` steps left to run
        forward or to undo (a wait counts as one: a lost wake-up is re-sent as a timeout is recovered),
        ``holds`` breakers of their services open then or since, and ``waits`` the durations of the waits
        it has not started yet. See docs/simulation.md, "The bounds"."""
        detect = self.detect(slack)
        # The work in hand: a process down when the faults stopped restarts; the task's CompleteBy (an
        # extend or a hold may have pushed it) passes, plus the grace an undo of a step skipped or cancelled
        # while running waits; the Supervisor recovers it, gives it back after a backoff, and the command
        # is delivered.
        in_hand = self.restart + max(0.0, latest - start) + self.grace + detect + self.backoff + self.delivery
        # An attempt that times out and is counted: its budget (dispatched up to e early), the Supervisor's
        # recovery, the backoff, the command's delivery. A step's last attempt in a phase: its reply within
        # the budget, or its m-th timeout, recovered as Error.
        retry = self.complete_by + self.early + detect + self.backoff + self.delivery
        last = self.complete_by + self.early + detect
        # An attempt held for an open breaker: its budget, the recovery that holds it, the hold, the
        # recovery that releases it, the command's delivery. Never counted.
        held = self.complete_by + self.early + detect + self.breaker + detect + self.delivery
        return in_hand + waits + phases * ((self.max_failures - 1) * retry + last) + holds * held

    def redelivery(self) -> float:
        """From the faults stopping to the last message a process that died held being delivered again: the
        process that held it is dead, the lock runs out, then the delivery."""
        return self.restart + self.lock + self.delivery


def _seconds(duration: str) -> float:
    return float(isodate.parse_duration(duration).total_seconds())
