"""The invariants, checked while a run goes and once it has settled, against the simulation's own record of
what happened (the services' ledger, the messages the broker carried, the breakers' history, the
processes that died), never against what the engine believes.

During the run, on every committed change of a task's state record:

- it follows the state machine (``engine.machine.TABLE``), and a finished task never changes again;
- a step's attempt numbers never go back;
- a step's outcome was reported by that very attempt: a step is Completed only after its current attempt's
  Agent sent a success (or an operator skipped it, audited in the same transaction), Failed only after
  that attempt's Agent reported a lasting failure, Compensated only after its current undo's Agent
  reported success; an Error for a failed undo only after that undo's Agent reported the failure;
- Error is entered only as the policy says: by the Scheduler for a failed undo (above), or by the
  Supervisor once the step has had ``SUPERVISOR_MAX_FAILURES`` attempts in its phase since the failures
  were last reset that each outlived their CompleteBy while the service's breaker was closed (or could
  not be read) at some moment between that CompleteBy and the next attempt: time spent held for an
  open breaker never counts;
- every audit entry describes the change it is written with (states before and after);
- a task is created once per id;
- at the services, an undo never lands while a later step of the same order is applied and not undone.

Once the run has settled (faults stopped, every message settled, the Supervisor has swept):

- every order reached a terminal state, within the bound after the faults stopped;
- the ledger: no effect made twice or under a key of no step; a Processed order has every step applied and
  none undone (a skipped step: not undone), a Compensated order has every applied step undone;
- no record outlives its order: no watch entry, no hold on a terminal order, no live record without its
  task (input, steps, listing entry, audit), one listing entry per live task naming its state, history
  tallies that count the history, a ``gone`` entry per tombstone;
- the audit trail holds every operator action that was answered as done (and no other), and one "error"
  entry per time the order entered Error;
- every entry into Error raised an ``OrderEnteredError`` alert, unless an operator took the order out of
  Error first (alerting is at least once: a duplicate is counted, not a violation);
- no message is lost: every message of a consumed queue was completed, dead-lettered or (an Agent's
  request past its deadline) expired.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine import machine
from engine.breaker import BreakerRecord, BreakerState
from engine.messages import AgentReply, AgentRequest, ReplyOutcome, SchedulerCommand
from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState
from engine.telemetry import ORDER_ENTERED_ERROR
from engine.workflow import WorkflowCatalog

from .bus import Message
from .loop import at_seconds
from .services import Effect

_LEGAL: set[tuple[ProcessState, ProcessState]] = {
    (row.source, target) for row in machine.TABLE for target in row.target_states
}


@dataclass(slots=True)
class Attempt:
    """One dispatch of a step in one phase, as the store recorded it."""

    number: int
    complete_by: float
    dispatched_at: float


@dataclass(slots=True)
class StepView:
    status: StepStatus = StepStatus.NOT_STARTED
    attempts: int = 0
    compensation_attempts: int = 0
    failures: int = 0
    complete_by: datetime | None = None


@dataclass
class OrderTruth:
    """What the simulation knows about one order."""

    order_id: str
    workflow: str
    agents: list[str]
    steps: list[str]
    created: int = 0
    state: ProcessState | None = None
    state_before_creation: ProcessState | None = None
    skipped: set[int] = field(default_factory=set)
    terminal_at: float | None = None
    views: list[StepView] = field(default_factory=list)
    attempts: dict[tuple[int, Phase], list[Attempt]] = field(default_factory=dict)
    replies: set[tuple[int, bool, int, ReplyOutcome]] = field(default_factory=set)
    errors: int = 0
    alerts: int = 0
    alert_owed: bool = False  # in Error, and no alert raised since it entered, nor an operator took it out
    audited: dict[str, int] = field(default_factory=dict)
    operator_done: dict[str, int] = field(default_factory=dict)
    operator_unsure: dict[str, int] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)
    trace: list[tuple[float, str, tuple[Any, ...]]] = field(default_factory=list)


class Oracle:
    """Collects the ground truth and the violations of one run."""

    def __init__(
        self, catalog: WorkflowCatalog, now: Callable[[], float], max_failures: int, trace_limit: int = 80
    ) -> None:
        self.catalog = catalog
        self.now = now
        self.max_failures = max_failures
        self.trace_limit = trace_limit
        self.orders: dict[str, OrderTruth] = {}
        self.violations: list[tuple[str, str]] = []  # (order id or "", what)
        self.breakers: dict[str, list[tuple[float, bool]]] = {}  # service -> (time, closed) per write
        self.unreadable: list[float] = []  # times the Supervisor could not read the breakers
        self.watch_created: dict[str, int] = {}  # cause -> watch entries that appeared
        self.dead_letters: dict[str, int] = {}
        self.poison_sent = 0
        self.status_messages = 0
        self.alerts_unmatched = 0
        self.counts: dict[str, int] = {}

    # ---- helpers -------------------------------------------------------------------------------------
    def violation(self, order_id: str, what: str) -> None:
        """Record a broken invariant (the run fails)."""
        self.violations.append((order_id, f"t={self.now():.3f} {what}"))
        if order_id in self.orders:
            self.note(order_id, "VIOLATION {}", what)

    def note(self, order_id: str, what: str, *args: Any) -> None:
        """Add a line to the order's trace (kept short: the last few dozen); ``what`` is formatted with
        ``args`` only if the trace is shown."""
        truth = self.orders.get(order_id)
        if truth is None:
            return
        truth.trace.append((self.now(), what, args))
        if len(truth.trace) > self.trace_limit * 2:
            del truth.trace[: self.trace_limit]

    def trace(self, order_id: str) -> list[tuple[float, str]]:
        """The order's trace, formatted."""
        truth = self.orders[order_id]
        return [(t, what.format(*args) if args else what) for t, what, args in truth.trace]

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def expect(self, order_id: str, workflow: str, version: int) -> OrderTruth:
        """An order the client is about to submit."""
        found = self.orders.get(order_id)
        if found is None:
            definition = self.catalog.find(workflow, version)
            assert definition is not None
            found = self.orders[order_id] = OrderTruth(
                order_id,
                workflow,
                [s.agent for s in definition.steps],
                [s.name for s in definition.steps],
                views=[StepView() for _ in definition.steps],
            )
        return found

    # ---- the store -------------------------------------------------------------------------------------
    def state_saved(
        self,
        order_id: str,
        before: TaskState | None,
        after: TaskState,
        steps: list[StepState],
        audit: list[AuditEntry],
    ) -> None:
        truth = self.orders.get(order_id)
        if truth is None:
            self.violation(order_id, "a task the client never submitted was written")
            return
        now = self.now()
        if before is None:
            truth.created += 1
            truth.state_before_creation = truth.state
            truth.state = after.process_state
            self.note(order_id, "created {}", after.process_state.value)
            return
        was, became = before.process_state, after.process_state
        if truth.state is not None and truth.state is not was:
            self.violation(order_id, f"saved over {was.value}, but the store held {truth.state.value}")
        if was.finished:
            self.violation(order_id, f"a finished order changed: {was.value} -> {became.value}")
        elif was is not became and (was, became) not in _LEGAL:
            self.violation(order_id, f"no transition {was.value} -> {became.value} in the state machine")
        if before.phase is Phase.FORWARD and after.phase is Phase.COMPENSATE:
            for key in [k for k in truth.attempts if k[1] is Phase.COMPENSATE]:
                del truth.attempts[key]
        skipped = any(entry.action == "skip" for entry in audit)
        for step in steps:
            self._step_changed(truth, after, step, skipped, now)
        for entry in audit:
            self._audited(truth, before, after, entry)
        if became is ProcessState.ERROR and was is not ProcessState.ERROR:
            self._entered_error(truth, after, audit, now)
            truth.alert_owed = True
        elif was is ProcessState.ERROR and became is not ProcessState.ERROR:
            truth.alert_owed = False  # an operator took it out: the alert, if lost, is no longer needed
        truth.state = became
        if became.terminal:
            truth.terminal_at = now
        self.note(
            order_id,
            "saved {}->{} step={} {} attempt={} completeBy={}",
            was.value,
            became.value,
            after.current_step,
            after.phase.value,
            after.attempt,
            after.complete_by,
        )

    def _step_changed(
        self, truth: OrderTruth, after: TaskState, step: StepState, skipped: bool, now: float
    ) -> None:
        order_id = truth.order_id
        view = truth.views[step.index]
        if step.attempts < view.attempts or step.compensation_attempts < view.compensation_attempts:
            self.violation(
                order_id,
                f"step {step.name}'s attempts went back: {view.attempts}/{view.compensation_attempts} -> "
                f"{step.attempts}/{step.compensation_attempts}",
            )
        if step.failures < view.failures:  # an operator reset, or a new phase: counted afresh
            truth.attempts[(step.index, after.phase)] = []
        cb = at_seconds(step.complete_by) if step.complete_by is not None else None
        for phase, number, known in (
            (Phase.FORWARD, step.attempts, view.attempts),
            (Phase.COMPENSATE, step.compensation_attempts, view.compensation_attempts),
        ):
            attempts = truth.attempts.setdefault((step.index, phase), [])
            if number > known and cb is not None:
                attempts.append(Attempt(number, cb, now))
            elif attempts and attempts[-1].number == number and cb is not None and phase is after.phase:
                attempts[-1].complete_by = cb  # extended
        old, new = view.status, step.status
        if old is not new:
            self._outcome_reported(truth, step, old, new, skipped)
        view.status, view.attempts = new, step.attempts
        view.compensation_attempts, view.failures = step.compensation_attempts, step.failures
        view.complete_by = step.complete_by

    def _outcome_reported(
        self, truth: OrderTruth, step: StepState, old: StepStatus, new: StepStatus, skipped: bool
    ) -> None:
        order_id = truth.order_id
        if new is StepStatus.COMPLETED:
            if skipped and isinstance(step.result, dict) and step.result.get("skipped"):
                truth.skipped.add(step.index)
                return
            wanted = (step.index, False, step.attempts, ReplyOutcome.SUCCEEDED)
        elif new is StepStatus.FAILED:
            wanted = (step.index, False, step.attempts, ReplyOutcome.FAILED)
        elif new is StepStatus.COMPENSATED:
            wanted = (step.index, True, step.compensation_attempts, ReplyOutcome.SUCCEEDED)
        else:
            return
        if wanted not in truth.replies:
            self.violation(
                order_id,
                f"step {step.name} became {new.value} (from {old.value}) but attempt {wanted[2]} "
                f"of its {'undo' if wanted[1] else 'action'} never reported {wanted[3].value}",
            )

    def _audited(self, truth: OrderTruth, before: TaskState, after: TaskState, entry: AuditEntry) -> None:
        truth.audited[entry.action] = truth.audited.get(entry.action, 0) + 1
        if (
            entry.process_state_before is not before.process_state
            or entry.process_state_after is not after.process_state
        ):
            self.violation(
                truth.order_id,
                f"audit entry {entry.action} says {entry.process_state_before.value} -> "
                f"{entry.process_state_after.value}, the change was {before.process_state.value} -> "
                f"{after.process_state.value}",
            )

    def _entered_error(
        self, truth: OrderTruth, after: TaskState, audit: list[AuditEntry], now: float
    ) -> None:
        order_id = truth.order_id
        truth.errors += 1
        entry = next((e for e in audit if e.action == "error"), None)
        if entry is None:
            self.violation(order_id, "entered Error without an audit entry")
            return
        index, phase = after.current_step, after.phase
        if entry.actor.startswith("scheduler"):
            if "is not deployed" in (entry.detail or ""):
                return
            undo = truth.views[index].compensation_attempts
            if (index, True, undo, ReplyOutcome.FAILED) not in truth.replies:
                self.violation(order_id, f"Error for a failed undo of step {index} that no Agent reported")
            return
        if not entry.actor.startswith("supervisor"):
            self.violation(order_id, f"entered Error by {entry.actor}")
            return
        attempts = truth.attempts.get((index, phase), [])
        service = truth.agents[index]
        counted = 0
        for i, attempt in enumerate(attempts):
            end = attempts[i + 1].dispatched_at if i + 1 < len(attempts) else now
            if attempt.complete_by <= now and self._closed_between(service, attempt.complete_by, end):
                counted += 1
        if counted < self.max_failures:
            self.violation(
                order_id,
                f"the Supervisor put step {truth.steps[index]} ({phase.value}) in Error after "
                f"{counted} attempt(s) that timed out with the breaker closed (of {len(attempts)}); "
                f"the policy needs {self.max_failures}",
            )

    def _closed_between(self, service: str, start: float, end: float) -> bool:
        """Whether the service's breaker was closed (or could not be read) at some moment in [start, end]."""
        if any(start <= t <= end for t in self.unreadable):
            return True
        closed = True
        for t, is_closed in self.breakers.get(service, []):
            if t <= start:
                closed = is_closed
            elif t <= end:
                if is_closed:
                    return True
            else:
                break
        return closed

    def creation_taken_back(self, order_id: str) -> None:
        truth = self.orders[order_id]
        truth.created -= 1
        truth.state = truth.state_before_creation
        self.note(order_id, "creation taken back: the id is in the history")

    def watch_written(self, order_id: str, complete_by: datetime | None, created: bool, cause: str) -> None:
        if created:
            self.watch_created[cause] = self.watch_created.get(cause, 0) + 1
        self.note(order_id, "watch {}: {}", cause, complete_by)

    # ---- breakers ------------------------------------------------------------------------------------
    def breaker_written(self, record: BreakerRecord) -> None:
        self.breakers.setdefault(record.service, []).append((self.now(), record.state is BreakerState.CLOSED))

    def breakers_unreadable(self) -> None:
        self.unreadable.append(self.now())

    # ---- the broker ------------------------------------------------------------------------------------
    def sent(self, message: Message) -> None:
        body = message.body
        if isinstance(body, AgentReply):
            truth = self.orders.get(body.order_id)
            if truth is not None:
                truth.replies.add((body.step_index, body.compensating, body.attempt, body.outcome))
                self.note(
                    body.order_id,
                    "reply {} undo={} #{} {}",
                    body.step_index,
                    body.compensating,
                    body.attempt,
                    body.outcome.value,
                )
        elif isinstance(body, AgentRequest):
            self.note(
                body.order_id,
                "request {} undo={} #{} until {}",
                body.step_index,
                body.compensating,
                body.attempt,
                body.complete_by,
            )
        elif isinstance(body, SchedulerCommand):
            self.note(body.order_id, "command {} {}", body.kind.value, body.reason)
        elif isinstance(body, bytes):
            self.poison_sent += 1
        else:
            self.status_messages += 1

    def settled(self, message: Message) -> None:
        if message.state == "dead-lettered":
            key = f"{message.queue}: {message.reason}"
            self.dead_letters[key] = self.dead_letters.get(key, 0) + 1

    # ---- the services ----------------------------------------------------------------------------------
    def effect_applied(self, effect: Effect, late: bool) -> None:
        truth = self.orders.get(effect.order_id)
        if truth is None:
            self.violation(effect.order_id, f"an effect {effect.key} of an order never submitted")
            return
        truth.effects.append(effect)
        self.note(effect.order_id, "applied {} {}{}", effect.service, effect.key, " (late)" if late else "")

    def effect_undone(self, effect: Effect) -> None:
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        self.note(effect.order_id, "undone {} {}", effect.service, effect.key)
        for other in truth.effects:
            if (
                other.step_index > effect.step_index
                and other.applied_at is not None
                and other.compensated_at is None
            ):
                self.violation(
                    effect.order_id,
                    f"{effect.key} was undone while {other.key}, a later step, was still applied",
                )

    # ---- alerts ----------------------------------------------------------------------------------------
    def alerted(self, order_id: str) -> None:
        truth = self.orders.get(order_id)
        if truth is None:
            self.alerts_unmatched += 1
            return
        truth.alerts += 1
        truth.alert_owed = False


class AlertHandler(logging.Handler):
    """Catches the engine's ``OrderEnteredError`` events (the alert an operator gets)."""

    def __init__(self, oracle: Oracle) -> None:
        super().__init__(logging.ERROR)
        self.oracle = oracle

    def emit(self, record: logging.LogRecord) -> None:
        fields: Any = record.__dict__
        if fields.get("microsoft.custom_event.name") == ORDER_ENTERED_ERROR:
            self.oracle.alerted(str(fields.get("orderId")))
