"""The invariants, checked while a run goes and once it has settled, against the simulation's own record of
what happened (the services' ledger, the messages the broker carried, the breakers' history, the
processes that died), never against what the engine believes.

During the run, on every committed change of a task's state record:

- it follows the state machine (``engine.machine.TABLE``), and a finished task never changes again;
- a step's attempt numbers never go back;
- a step's outcome was reported by that very attempt: a step is Completed only after its current attempt's
  Agent sent a success (or an operator skipped it, audited in the same transaction), Failed only after
  that attempt's Agent reported a lasting failure, Compensated only after its current undo's Agent
  reported success; an Error for a failed undo only after that undo's Agent reported the failure (a
  callback's outcome is reported by the reply the callback route sends for its dispatch); a step becomes
  Completed once (its outcome and its result are recorded once);
- a step that calls a service waits only for its callback (:meth:`Oracle._callback_awaited`): from
  Running, after its service, which may answer later, answered that very attempt 202, the task Waiting for
  a "callback" until the step's CompleteBy; a cancel ends that wait ("cancelled while waiting"), an
  extend moves it and re-sends nothing;
- Error is entered only as the policy says: by the Scheduler for a failed undo (above), or by the
  Supervisor once the step has had ``SUPERVISOR_MAX_FAILURES`` attempts in its phase since the failures
  were last reset that each outlived their CompleteBy while the service's breaker was closed (or could
  not be read) at some moment between that CompleteBy and the next attempt: time spent held for an
  open breaker never counts (an attempt its service took, 202, counts whatever the breaker);
- every audit entry describes the change it is written with (states before and after);
- a task is created once per id;
- a step is left out only when its condition does not hold on the order's input and the values earlier
  steps' services returned (as the simulation knows them, not as the record says), from Not started, with
  that condition as its reason; a step whose condition does not hold is never dispatched, and a step
  without an undo action never has its undo dispatched;
- a step Completed from its Agent's reply records exactly the values its service returned;
- waits (:meth:`Oracle._wait_started`, :meth:`Oracle._wait_ended`, :meth:`Oracle._passes_waits`): a wait
  starts as the run set it (its duration from the moment the engine decided it, or its input's time) and
  the task says so; its outcome is applied once per attempt and only as its kind allows (a timer by its
  wake-up once its time has come, an approval by an approve, either by a skip; an approval Failed by a
  reject or, under policy compensate, by the Supervisor once its deadline passed; under policy error it
  enters Error then; any wait by a cancel); nothing runs before its timer (a later step is dispatched
  only once every wait before it ended well, a timer not before its time as recorded); a rejected or
  expired approval, or a wait cancelled, never reaches the next step; a finished order has no wait under
  way;
- groups (steps side by side, :meth:`Oracle._passes_groups`, :meth:`Oracle._group_expiries`): each step of a
  group is held to the invariants above on its own (its attempts, its outcome, its result, its Supervisor's
  count; a step of a group waiting for its callback leaves the task Processing); no step after a group is
  dispatched before every step of the group is Completed or Left out (the join); an operator's action on a
  step of a running group shows its effect on that step, the task staying at the group.

At the services, on every call and every effect:

- an undo never lands while a later step of the same order is applied and not undone (a step that cannot
  be undone excepted: it stays applied);
- a step left out by its condition is never called (a call of a step whose condition does not hold is one);
- a result passed on is the one returned: every result value a call carries (the client builds its body
  from the request, as in production) is the value the producing step's service returned, and a call
  carries each value it reads that the engine had when it dispatched it (an undo, its own step's values
  when that step completed from its reply);
- a step that cannot be undone is never applied after an undo of its order landed: a cancel (or a failure)
  waits for it to land or to be unable to land before it undoes the steps before it;
- no call of a step reaches its service before a timer before it ends, or after a wait before it was
  rejected, expired or cancelled;
- an undo waits for the callback: it never reaches a service still deciding, within the budget, the apply
  it answered 202 (:meth:`Oracle.withdrawn`);
- the join holds at the services too (no call of a step after a group before the group joined), and a failed
  or cancelled group lets its steps settle before its undo: no step of a group that can be undone is applied
  after its own undo landed.

At the callback route, on every callback it answers (:meth:`Oracle.callback_answered`): a forged one is
refused 401; one its service signed is taken only for the dispatch the order waited for meanwhile, as the
reply of that dispatch with the service's outcome, and refused (409) only when the order did not wait for it
throughout (404: its order is finished and purged).

Parked orders (the history table's changes, :class:`simulation.storage.Storage`): a park or a return is no
change of the order's state (a return is checked as a save from the parked copy's state); an order is never
in neither place (no live state record, no parked copy, unfinished); each shard's waiting tally counts its
parked copies by kind; a parked order whose live records are gone keeps its listing entry and a calendar
entry or a watch entry.

Once the run has settled (faults stopped, every message settled, the Supervisor has swept):

- every order reached a terminal state, within the bound after the faults stopped;
- the ledger: no effect made twice or under a key of no step; a Processed order has every step applied and
  none undone (a skipped step: not undone) except the steps left out by their condition, which are Left
  out in its record and have no effect, and its waits, each ended well; a Compensated order has every
  applied step undone, except the steps that cannot be undone (a failed or cancelled group leaves no
  applied effect); no call was ever made under the key of a
  step left out; nothing after a wait rejected, expired or cancelled was applied (an order cancelled inside
  its cancellation window has no shipment);
- no record outlives its order: no watch entry, no hold on a terminal order, no live record without its
  task (input, steps, listing entry, audit), one listing entry per live task naming its state, history
  tallies that count the history, a ``gone`` entry per tombstone; no parked copy left but a stale one beside
  an order still live (counted), and waiting tallies that count the parked copies;
- the audit trail holds every operator action that was answered as done (and no other), and one "error"
  entry per time the order entered Error;
- every entry into Error raised an ``OrderEnteredError`` alert, unless an operator took the order out of
  Error first (alerting is at least once: a duplicate is counted, not a violation);
- no message is lost: every message of a consumed queue was completed, dead-lettered or (an Agent's
  request past its deadline) expired.

Liveness, what must happen (the bounds are :class:`simulation.liveness.Limits`, from the run's settings):

- the Supervisor's counting is held to the policy the other way too: once a step has had
  ``SUPERVISOR_MAX_FAILURES`` timeouts the policy counts in its phase since its count was last reset (an
  attempt that outlived its CompleteBy, not held, its service's breaker closed from that CompleteBy until
  the Supervisor came), the Supervisor's recovery of it is Error, never another attempt (checked on every
  save, faults or not);
- once the faults stopped, the Supervisor keeps its schedule: a sweep ends normally, and it recovers every
  task in flight whose latest CompleteBy had passed when it started: at most one sweep interval after that
  CompleteBy, plus the scheduling slack (the sweep still running at that tick, and its own run);
- every operator action answered as done had its effect, as ``engine.tasks`` promises it: the save that
  carries its audit entry shows it (an extend moved the step's CompleteBy by what was asked and re-sent the
  request with it; a retry handed the task back unlocked with a fresh CompleteBy, a failure count reset if
  it came out of Error, and the step was dispatched again; a skip completed the step with no result and the
  operator's reason, and handed the task back; a resubmit put an Error order back to Pending, and a
  Scheduler claimed it; a cancel started the undo), its command was sent, and a cancel ended Compensated
  (or in Error, which its answer could not know of: counted as such), unless a later action on the order
  took over;
- once the faults stopped, every order is terminal within its own bound: from then, or from its last action
  saved since, the work left to it under the policy (checked while the run settles, and at its end).
"""

from __future__ import annotations

import bisect
import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine import machine, queues
from engine.breaker import BreakerRecord, BreakerState
from engine.conditions import Condition, value_at
from engine.messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusMessage,
)
from engine.settings import EngineSettings
from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState
from engine.telemetry import ORDER_ENTERED_ERROR
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition

from .bus import Message
from .liveness import Limits
from .loop import at_seconds
from .services import Effect

OPERATOR_NOTE = "simulated #"  # an operator action's note, with its token
SKIP_REASON = "skipped by an operator: "  # a skipped step's reason, before the operator's note
LEFT_OUT_REASON = "condition not met: "  # a left-out step's reason, before its condition in words
ENGINE_ENTRIES = ("error", "left out")  # audit entries the engine writes of its own accord (no one acted)
CANCELLED_WAITING = "cancelled while waiting"  # a wait's error when a cancel ended it
UNDONE_WITH_GROUP = "undone with its group"  # a step of a group waiting for its callback when another failed
TOLERANCE = 1e-6  # a datetime's microsecond, in the virtual seconds the oracle compares

_LEGAL: set[tuple[ProcessState, ProcessState]] = {
    (row.source, target) for row in machine.TABLE for target in row.target_states
}


@dataclass(slots=True)
class Attempt:
    """One dispatch of a step in one phase, as the store recorded it."""

    number: int
    complete_by: float
    dispatched_at: float
    accepted: bool = False  # its service answered 202: the step waited for its callback


@dataclass(slots=True)
class StepView:
    status: StepStatus = StepStatus.NOT_STARTED
    attempts: int = 0
    compensation_attempts: int = 0
    failures: int = 0
    complete_by: datetime | None = None
    retry_at: datetime | None = None  # a step of a group: when a Scheduler is asked to dispatch it again


@dataclass(frozen=True, slots=True)
class WaitTruth:
    """A wait as the run set it: a timer (``seconds`` from its start, or until the time the input's
    ``until`` holds) or an approval (``seconds`` to its deadline, then ``on_deadline``)."""

    kind: str  # "timer" or "approval"
    seconds: float | None  # its duration (None: a timer until an input time)
    until: str | None = None  # a timer's input path
    on_deadline: str = ""  # an approval's policy: "compensate" or "error"


@dataclass(slots=True)
class OperatorAct:
    """One action of the operator (or the application's cancel) as asked, and what the store saw of it."""

    token: int
    what: str
    step: str | None  # the step it names (retry, extend, skip)
    seconds: float | None  # how far an extend pushes the step's CompleteBy
    asked_at: float
    saved_at: float | None = None  # the save that carries its audit entry (None: nothing saved)
    after: ProcessState | None = None  # the state that save left
    index: int = 0  # the current step at the save
    phase: Phase = Phase.FORWARD
    attempts: int = 0  # the step's dispatches in that phase at the save
    complete_by: float | None = None  # the step's CompleteBy after the save
    answered: bool = False  # answered as done
    wait: bool = False  # it acted on a wait (an extend of one re-sends nothing)
    # it acted on a step of a group that runs, and the others ran on: the task stays Processing (a skip hands
    # nothing back, and sends no command)
    beside: bool = False

    @property
    def name(self) -> str:
        """How a violation names it."""
        return f"{self.what} of {self.step}" if self.step else self.what


@dataclass
class OrderTruth:
    """What the simulation knows about one order."""

    order_id: str
    workflow: str
    agents: list[str]
    steps: list[str]
    input: dict[str, Any] = field(default_factory=dict)  # what the client submitted (the stored input)
    conditions: list[Condition | None] = field(default_factory=list)
    undoable: list[bool] = field(default_factory=list)  # whether each step has an undo action
    producers: dict[str, int] = field(default_factory=dict)  # a result value's name -> the step returning it
    returned: set[int] = field(default_factory=set)  # steps Completed from their reply (their values known)
    left_out: set[int] = field(default_factory=set)  # steps saved as left out by their condition
    first_undo_at: float | None = None  # when an undo of the order first landed at a service
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
    # liveness (see :mod:`simulation.liveness`)
    expiries: dict[tuple[int, Phase], int] = field(default_factory=dict)  # counted since the last reset
    latest_complete_by: float = 0.0  # the latest CompleteBy the task's state record has had
    saves: int = 0
    acted_at: float = 0.0  # when an operator's (or the application's) last action on it was saved
    left_pending_at: float = 0.0  # when a save last took it out of Pending
    current_step: int = 0
    phase: Phase = Phase.FORWARD
    # from: start, latest CompleteBy, its step and phase, the waits ahead (their durations)
    bound: tuple[float, float, int, Phase, float] | None = None
    late: bool = False  # its bound was reported broken
    acts: list[OperatorAct] = field(default_factory=list)
    commands_at: float = -1.0  # when the last Scheduler command about it was sent
    requests: dict[tuple[int, bool, int], float] = field(default_factory=dict)  # latest deadline sent
    saved_at: float = 0.0  # when its last save was committed
    # waits (see :class:`WaitTruth`)
    waits: list[WaitTruth | None] = field(default_factory=list)  # per step: its wait, or None for a call
    until: dict[int, float] = field(default_factory=dict)  # a wait's time (its deadline), moved by extends
    ended: set[tuple[int, int]] = field(default_factory=set)  # (step, attempt) of the waits that ended
    closed: dict[int, tuple[str, float]] = field(default_factory=dict)  # waits ended badly: how, when
    # callbacks (services that answer later)
    later: list[bool] = field(default_factory=list)  # per step: its service may answer 202 and call back
    completed: set[int] = field(default_factory=set)  # steps that became Completed (once each)
    # The dispatches whose outcome the order waits for, from each save that changed them: (when, each
    # (step, undoing, attempt), whether the Scheduler would apply its outcome then). None while no call of
    # it runs or waits.
    # A group's steps run side by side: the order waits for each of them in flight (the tuple's dispatches).
    awaiting: list[tuple[float, tuple[tuple[int, bool, int], ...], bool]] = field(default_factory=list)
    parks: int = 0  # times its live records went for a parked copy (see simulation.storage)
    # groups (steps side by side): per step, the steps of its group (just itself in none); and when each
    # group (by its first step) first had every step Completed or Left out (its join)
    groups: list[range] = field(default_factory=list)
    joined: dict[int, float] = field(default_factory=dict)
    errored: int | None = None  # the step the Supervisor last put the order in Error for
    # storefronts: the submitting storefront (None: an order of no storefront), the id its client gave, the
    # status events sent to the order's own status queue; and when its task (the one kept) was submitted
    storefront: str | None = None
    client_id: str = ""
    statuses: set[str] = field(default_factory=set)
    created_at: datetime | None = None


class Oracle:
    """Collects the ground truth and the violations of one run."""

    def __init__(
        self,
        catalog: WorkflowCatalog,
        now: Callable[[], float],
        max_failures: int,
        returns: Callable[[str, str], list[str]] | None = None,
        trace_limit: int = 80,
        settings: EngineSettings | None = None,
        asynchronous: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.catalog = catalog
        # whether a service may answer an action 202 and call back (its resource's declaration)
        self.asynchronous = asynchronous or (lambda service, action: False)
        settings = settings or EngineSettings()
        self.wait_seconds = dict(settings.wait_seconds)  # the waits' durations the run set, by setting
        self.window = settings.step_complete_by_seconds  # a timer's CompleteBy is its time plus this
        self.now = now
        self.returns = returns or (lambda service, action: [])  # the values an apply answers with, by name
        self.dispatched: Callable[[str, int], None] = lambda order_id, index: None  # a step's first dispatch
        self.first_violation: Callable[[], None] = lambda: None  # told of the run's first violation
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
        # liveness (see simulation.liveness): set when the run starts and when its faults stop
        self.limits: Limits | None = None
        self.ledger: Mapping[tuple[str, str], Effect] = {}
        self.quiet_at: float | None = None
        self.acts: dict[int, tuple[str, OperatorAct]] = {}  # the operator's actions by token
        # in flight: (latest CompleteBy, n, order, its saves then, when saved)
        self._due: list[tuple[float, int, str, int, float]] = []
        self._pushed = 0
        self.slack = 0.0  # the longest a sweep that ended after the faults stopped ran
        self._sweeping: list[float] = []  # when each sweep under way started
        self.finished_at = 0.0  # when the last order with a bound became terminal

    # ---- helpers -------------------------------------------------------------------------------------
    def violation(self, order_id: str, what: str) -> None:
        """Record a broken invariant (the run fails)."""
        self.violations.append((order_id, f"t={self.now():.3f} {what}"))
        if len(self.violations) == 1:
            self.first_violation()
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

    def expect(
        self,
        order_id: str,
        workflow: str,
        version: int,
        order_input: dict[str, Any] | None = None,
        storefront: str | None = None,
        client_id: str | None = None,
    ) -> OrderTruth:
        """An order the client is about to submit, with the input it submits; ``storefront``: the one that
        submits it (``order_id`` is then its task id, ``client_id`` the id it gave)."""
        found = self.orders.get(order_id)
        if found is None:
            definition = self.catalog.find(workflow, version)
            assert definition is not None
            found = self.orders[order_id] = OrderTruth(
                order_id,
                workflow,
                [s.agent or "" for s in definition.steps],
                [s.name for s in definition.steps],
                input=dict(order_input or {}),
                conditions=[s.when for s in definition.steps],
                undoable=[s.compensation is not None for s in definition.steps],
                producers=self._producers(definition),
                views=[StepView() for _ in definition.steps],
                waits=[self._wait(step) for step in definition.steps],
                later=[
                    step.calls and self.asynchronous(step.call_agent, step.action or "")
                    for step in definition.steps
                ],
                groups=[definition.group_range(i) for i in range(len(definition.steps))],
                storefront=storefront,
                client_id=client_id or order_id,
            )
        return found

    def _wait(self, step: StepDefinition) -> WaitTruth | None:
        """The step's wait with the durations the run set (as the engine reads them: a setting the run
        sets gives the duration, else the declared one)."""
        wait = step.wait
        if isinstance(wait, Timer):
            seconds = None
            if wait.after_seconds is not None:
                seconds = self.wait_seconds.get(wait.setting or "", wait.after_seconds)
            return WaitTruth("timer", seconds, wait.until)
        if isinstance(wait, Approval):
            seconds = self.wait_seconds.get(wait.setting or "", wait.deadline_seconds)
            return WaitTruth("approval", seconds, on_deadline=wait.on_deadline)
        return None

    def _input_time(self, truth: OrderTruth, path: str) -> float | None:
        """The time an input field holds, in virtual seconds (None: none, or not a time with a zone)."""
        value = value_at({"input": truth.input}, path)
        try:
            at = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            return None
        return at_seconds(at) if at is not None and at.tzinfo is not None else None

    def wait_length(self, truth: OrderTruth, index: int, start: float | None = None) -> float:
        """How long step ``index``'s wait lasts from ``start`` (now by default), as the run set it."""
        wait = truth.waits[index] if index < len(truth.waits) else None
        if wait is None:
            return 0.0
        if wait.seconds is not None:
            return wait.seconds
        start = self.now() if start is None else start
        due = self._input_time(truth, wait.until or "")
        return max(0.0, (due if due is not None else start) - start)

    def _producers(self, definition: WorkflowDefinition) -> dict[str, int]:
        """Which step returns each result value of the workflow (the declaration allows one per name)."""
        return {
            name: index
            for index, step in enumerate(definition.steps)
            if step.agent is not None and step.action is not None
            for name in self.returns(step.agent, step.action)
        }

    # ---- results and conditions, from the simulation's own record --------------------------------------
    def _returned(self, truth: OrderTruth, index: int) -> dict[str, Any]:
        """The values step ``index`` passed on: what its service returned, if the step Completed from its
        reply (a step skipped, left out or not completed passed nothing on)."""
        if index not in truth.returned:
            return {}
        effect = self.ledger.get((truth.agents[index], f"{truth.order_id}:{truth.steps[index]}"))
        return dict(effect.returned or {}) if effect is not None else {}

    def _runs(self, truth: OrderTruth, index: int) -> bool:
        """Whether step ``index``'s condition holds on the order's input and the values the steps before it
        returned (final once the step's turn came: the steps before it are done)."""
        condition = truth.conditions[index] if index < len(truth.conditions) else None
        if condition is None:
            return True
        results: dict[str, Any] = {}
        for before in range(index):
            results.update(self._returned(truth, before))
        return condition.holds({"input": truth.input, "results": results})

    def _condition(self, truth: OrderTruth, index: int) -> str:
        condition = truth.conditions[index]
        return condition.describe() if condition is not None else "none"

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
        previous, truth.saved_at = truth.saved_at, now
        if before is None:
            truth.created += 1
            truth.state_before_creation = truth.state
            if self.quiet_at is not None and truth.bound is None:
                self._bound_from(truth, now)  # submitted after the faults stopped
            # A second creation (of an id the history holds) is taken back before anything is sent.
            if after.process_state is ProcessState.PENDING or truth.created > 1:
                truth.state = after.process_state
                self._watched(truth, after, now)
                self.note(order_id, "created {}", after.process_state.value)
                return
            # Written claimed (Scheduler.claim_new): the submission's Pending record and the claim's save
            # in one write, checked as that save.
            self.note(order_id, "created Pending, claimed in the same write")
            truth.state, previous = ProcessState.PENDING, now
            before = _as_submitted(after, self.window)
        self._expiry_handled(truth, before, after, steps, audit, now)
        # Reported once the save's steps are checked: what a step became is the invariant about it, and an
        # action's effect (its promise) is said after it.
        effects = self._acted(truth, before, after, steps, audit, now)
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
            if len(_group_of(truth, before.current_step)) > 1 and was is ProcessState.PROCESSING:
                self.count("groups undone while they ran")
                if after.next_attempt_at is not None and at_seconds(after.next_attempt_at) > now:
                    self.count("groups let settle before their undo")
        acts = {entry.action for entry in audit if entry.action not in ENGINE_ENTRIES}
        for step in sorted(steps, key=lambda s: s.index):  # a step's values before a later step's dispatch
            self._step_changed(truth, before, after, step, acts, previous, now)
        if became.finished:
            waiting = [
                truth.steps[i] for i, view in enumerate(truth.views) if view.status is StepStatus.WAITING
            ]
            if waiting or after.waiting_for is not None:
                self.violation(
                    order_id,
                    f"{became.value} with a wait under way: {', '.join(waiting) or 'no step'} Waiting, the "
                    f"task waiting for {after.waiting_for} until {after.wait_until}",
                )
        for problem in effects:
            self.violation(order_id, problem)
        for entry in audit:
            self._audited(truth, before, after, entry)
        if became is ProcessState.ERROR and was is not ProcessState.ERROR:
            self._entered_error(truth, after, audit, now)
            truth.alert_owed = True
        elif was is ProcessState.ERROR and became is not ProcessState.ERROR:
            truth.alert_owed = False  # an operator took it out: the alert, if lost, is no longer needed
        truth.state = became
        truth.current_step, truth.phase = after.current_step, after.phase
        self._joined(truth, now)
        awaits, applies = self._awaits(truth, after)
        if (truth.awaiting[-1][1:] if truth.awaiting else ((), False)) != (awaits, applies):
            truth.awaiting.append((now, awaits, applies))
        if became.terminal and not was.terminal:
            # When it ended, not its later saves (recording an Error's alert as raised is one).
            truth.terminal_at = now
            self._terminal_on_time(truth, now)
        self._watched(truth, after, now)
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
        self,
        truth: OrderTruth,
        before: TaskState,
        after: TaskState,
        step: StepState,
        acts: set[str],
        previous: float,
        now: float,
    ) -> None:
        """One step's record as a save wrote it (``acts``: the people's actions audited with it; ``previous``:
        when the save before it was committed)."""
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
        if step.attempts > view.attempts and not self._runs(truth, step.index):
            self.violation(
                order_id,
                f"step {step.name} was dispatched, but its condition does not hold "
                f"({self._condition(truth, step.index)}): a step left out by its condition is never called",
            )
        if step.compensation_attempts > view.compensation_attempts and not _undoable(truth, step.index):
            self.violation(
                order_id,
                f"step {step.name} cannot be undone, but an undo of it was dispatched "
                f"(undo attempt {step.compensation_attempts})",
            )
        if step.attempts > view.attempts:
            if step.status is StepStatus.WAITING:
                self._wait_started(truth, after, step, previous, now)
            self._passes_waits(truth, step.index, now, "was dispatched")
            self._passes_groups(truth, step.index, now, "was dispatched", joined=False)
        if step.attempts > view.attempts == 0:
            self.dispatched(order_id, step.index)
        cb = at_seconds(step.complete_by) if step.complete_by is not None else None
        for phase, number, known in (
            (Phase.FORWARD, step.attempts, view.attempts),
            (Phase.COMPENSATE, step.compensation_attempts, view.compensation_attempts),
        ):
            attempts = truth.attempts.setdefault((step.index, phase), [])
            if number > known and cb is not None:
                attempts.append(Attempt(number, cb, now))
            elif (
                attempts
                and attempts[-1].number == number
                and cb is not None
                and phase is after.phase
                and step.retry_at is None  # a step of a group asked again: its CompleteBy watches the ask
            ):
                attempts[-1].complete_by = cb  # extended
        old, new = view.status, step.status
        if old is not new and new is StepStatus.WAITING and _wait_of(truth, step.index) is None:
            self._callback_awaited(truth, before, after, step, old)
        if old is not new:
            # When the move was decided (UpdatedAt, the transition's clock): a save can land a little later.
            decided = at_seconds(after.updated_at)
            self._outcome_reported(truth, before, step, old, new, acts, now, decided)
        view.status, view.attempts = new, step.attempts
        view.compensation_attempts, view.failures = step.compensation_attempts, step.failures
        view.complete_by, view.retry_at = step.complete_by, step.retry_at

    def _outcome_reported(
        self,
        truth: OrderTruth,
        before: TaskState,
        step: StepState,
        old: StepStatus,
        new: StepStatus,
        acts: set[str],
        now: float,
        decided: float,
    ) -> None:
        order_id = truth.order_id
        if old is StepStatus.LEFT_OUT:
            self.violation(order_id, f"step {step.name}, left out by its condition, became {new.value}")
            return
        if new is StepStatus.LEFT_OUT:
            self._left_out(truth, step, old)
            return
        if _wait_of(truth, step.index) is not None:
            if new in (StepStatus.COMPLETED, StepStatus.FAILED):
                self._wait_ended(truth, before, step, old, new, acts, now, decided)
            return
        if new is StepStatus.COMPLETED:
            if step.index in truth.completed:
                self.violation(
                    order_id,
                    f"step {step.name} became Completed again (from {old.value}, attempt {step.attempts}): a "
                    f"step's outcome is recorded once",
                )
            truth.completed.add(step.index)
            if "skip" in acts and _skipped(step):
                truth.skipped.add(step.index)
                return
            wanted = (step.index, False, step.attempts, ReplyOutcome.SUCCEEDED)
            self._result_recorded(truth, step)
        elif new is StepStatus.FAILED:
            if old is StepStatus.WAITING and "cancel" in acts and step.last_error == CANCELLED_WAITING:
                self.count("cancelled while waiting for a callback")  # undone once it can no longer come
                return
            if old is StepStatus.WAITING and step.last_error == UNDONE_WITH_GROUP:
                # A step of its group failed (its Agent said so): it is undone once its answer can no
                # longer come.
                failed = [
                    i
                    for i in _group_of(truth, step.index)
                    if i != step.index
                    and (i, False, truth.views[i].attempts, ReplyOutcome.FAILED) in truth.replies
                ]
                if failed:
                    self.count("steps of a failed group undone while waiting for a callback")
                    return
                self.violation(
                    order_id,
                    f"step {step.name} was failed with its group while waiting for its callback, but no step "
                    f"of its group reported a failure",
                )
                return
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

    # ---- callbacks -------------------------------------------------------------------------------------
    def _callback_awaited(
        self, truth: OrderTruth, before: TaskState, after: TaskState, step: StepState, old: StepStatus
    ) -> None:
        """A step that calls a service waits: only for its service's callback, after the service
        answered that very attempt 202 (the Agent's reply said so), from Running, with the task Waiting for
        a "callback" until the step's CompleteBy; the accept moves no CompleteBy (the task's may be a
        hold's)."""
        order_id, name, index = truth.order_id, step.name, step.index
        self.count("steps waiting for a callback")
        later = truth.later[index] if index < len(truth.later) else False
        accepted = (index, False, step.attempts, ReplyOutcome.ACCEPTED) in truth.replies
        view = truth.views[index]
        if not later or not accepted or old is not StepStatus.RUNNING or after.phase is not Phase.FORWARD:
            why = (
                "its service always answers at once"
                if not later
                else f"its service never answered attempt {step.attempts} 202"
                if not accepted
                else f"it was {old.value} ({after.phase.value})"
            )
            self.violation(order_id, f"step {name}, which calls a service, was saved as waiting, but {why}")
            return
        if len(_group_of(truth, index)) > 1:
            # A step of a group waits on its own: the task stays Processing, its CompleteBy as it was.
            if (
                after.process_state is not ProcessState.PROCESSING
                or after.waiting_for is not None
                or after.complete_by != before.complete_by
                or step.complete_by != view.complete_by
            ):
                self.violation(
                    order_id,
                    f"the task whose group's step {name} waits for its callback is "
                    f"{after.process_state.value}, waiting for {after.waiting_for}, CompleteBy "
                    f"{after.complete_by} (was {before.complete_by}); the step's CompleteBy was "
                    f"{view.complete_by}, is {step.complete_by}",
                )
            self.count("steps of a group waiting for a callback")
        elif (
            after.process_state is not ProcessState.WAITING
            or after.waiting_for != "callback"
            or after.wait_until != step.complete_by
            or after.complete_by != before.complete_by
            or step.complete_by != view.complete_by
        ):
            self.violation(
                order_id,
                f"the task waiting for {name}'s callback is {after.process_state.value}, waiting for "
                f"{after.waiting_for} until {after.wait_until}, CompleteBy {after.complete_by} (was "
                f"{before.complete_by}); the step's CompleteBy was {view.complete_by}, is {step.complete_by}",
            )
        attempts = truth.attempts.get((index, Phase.FORWARD), [])
        if attempts and attempts[-1].number == step.attempts:
            attempts[-1].accepted = True

    def _awaits(self, truth: OrderTruth, after: TaskState) -> tuple[tuple[tuple[int, bool, int], ...], bool]:
        """The dispatches whose outcome the order waits for after a save, as the callback route's fence reads
        it (its current step calls a service and runs, waits for its callback, or is being undone, in that
        phase and attempt; forward, every step of the current group that runs or waits, each at its own
        attempt), and whether the Scheduler would apply that outcome (the task in flight on it: Processing
        or Waiting forward, Compensating back)."""
        index = after.current_step
        if after.process_state.finished or index >= len(truth.views) or _wait_of(truth, index) is not None:
            return (), False
        back = after.phase is Phase.COMPENSATE
        group = _group_of(truth, index)
        if len(group) > 1 and not back:
            found = tuple(
                (i, False, truth.views[i].attempts)
                for i in group
                if truth.views[i].status in (StepStatus.RUNNING, StepStatus.WAITING)
            )
            return found, bool(found) and after.process_state is ProcessState.PROCESSING
        status = truth.views[index].status
        if status not in ((StepStatus.COMPENSATING,) if back else (StepStatus.RUNNING, StepStatus.WAITING)):
            return (), False
        if back:
            applies = after.process_state is ProcessState.COMPENSATING
        else:
            applies = after.process_state is ProcessState.PROCESSING or (
                after.process_state is ProcessState.WAITING and after.waiting_for == "callback"
            )
        return ((index, back, after.attempt),), applies

    def _awaited(
        self, truth: OrderTruth, start: float, end: float
    ) -> list[tuple[tuple[tuple[int, bool, int], ...], bool]]:
        """What the order waited for from ``start`` to ``end``: the value at ``start``, then each change."""
        found: list[tuple[tuple[tuple[int, bool, int], ...], bool]] = [((), False)]
        for at, dispatch, applies in truth.awaiting:
            if at <= start:
                found[0] = (dispatch, applies)
            elif at <= end:
                found.append((dispatch, applies))
            else:
                break
        return found

    def callback_answered(
        self,
        service: str,
        dispatch: tuple[str, int, bool, int],
        outcome: str,
        forged: bool,
        answer: Any,
        start: float,
        end: float,
    ) -> None:
        """The callback route answered a callback (``answer``: ``Taken`` or ``Refused``), sent at ``start``
        and answered at ``end``. A forged one is refused 401. One the service signed is refused only as not
        awaited (409), or for an order gone (404, a finished order purged); it is taken only if the order
        waited for that very dispatch at some moment meanwhile (the route's fence), and becomes the reply of
        that dispatch with the outcome the service sent; refused (409), the order did not wait for it
        throughout (the Scheduler would not have applied it at some moment). One taken while the step still
        said so but the Scheduler would drop its reply (the task given back, or in Error) is counted (finding
        14)."""
        order_id, index, undoing, attempt = dispatch
        key = (index, undoing, attempt)
        truth = self.orders.get(order_id)
        what = f"the callback of {'undo' if undoing else 'attempt'} {attempt} of step {index} ({outcome})"
        status = getattr(answer, "status", None)
        self.count("callbacks answered " + (str(status) if status is not None else "202 (taken)"))
        if truth is None:
            self.violation(order_id, f"{what} came for an order never submitted")
            return
        self.note(order_id, "callback {} of {} answered {}", outcome, key, status or 202)
        name = truth.steps[index] if index < len(truth.steps) else str(index)
        what = what.replace(f"step {index}", name)
        awaited = self._awaited(truth, start, end)
        if forged:
            if status != 401:
                self.violation(order_id, f"a forged copy of {what} was answered {status or 202}, not 401")
            return
        if status is not None:
            message = getattr(answer, "message", "")
            if status == 409:
                if all(key in dispatches and applies for dispatches, applies in awaited):
                    self.violation(
                        order_id, f"{what} was refused ({message}), yet the order waited for it throughout"
                    )
            elif status != 404 or (truth.state is not None and not truth.state.finished):
                self.violation(order_id, f"{what}, signed by its service, was refused {status}: {message}")
            return
        reply = answer.reply
        wanted = ReplyOutcome.SUCCEEDED if outcome == "done" else ReplyOutcome.FAILED
        made = (reply.order_id, reply.step_index, reply.compensating, reply.attempt)
        if made != dispatch or reply.outcome is not wanted:
            self.violation(
                order_id,
                f"{what} was handed to the Scheduler as the reply {reply.outcome.value} of "
                f"{'undo' if reply.compensating else 'attempt'} {reply.attempt} of step {reply.step_index}",
            )
        if not any(key in dispatches for dispatches, _ in awaited):
            waited = ", ".join(str(d[0] if len(d) == 1 else d or None) for d, _ in awaited)
            self.violation(
                order_id,
                f"{what} was taken, but the order never waited for it meanwhile (it waited for {waited}): a "
                f"callback for a dispatch the order no longer waits for is refused (409)",
            )
        elif not any(key in dispatches and applies for dispatches, applies in awaited):
            self.count("callbacks taken that the Scheduler drops (finding 14)")
        else:
            self.count("callbacks taken")

    # ---- waits -----------------------------------------------------------------------------------------
    def _wait_started(
        self, truth: OrderTruth, after: TaskState, step: StepState, previous: float, now: float
    ) -> None:
        """A wait starts (or starts again): it waits as long as the run set, from the moment the engine
        decided it (after the save it read, before this one), and the task says what it waits for."""
        order_id, name = truth.order_id, step.name
        wait = _wait_of(truth, step.index)
        self.count("waits started")
        if wait is None:
            self.violation(order_id, f"step {name}, which calls a service, was saved as waiting")
            return
        if step.complete_by is None:
            self.violation(order_id, f"the {wait.kind} {name} waits with no time")
            return
        until = at_seconds(step.complete_by)
        truth.until[step.index] = until
        if wait.seconds is not None:
            start = until - wait.seconds
            if not previous - TOLERANCE <= start <= now + TOLERANCE:
                self.violation(
                    order_id,
                    f"the {wait.kind} {name} waits until {until:.3f}: {wait.seconds:g} s from {start:.3f}, "
                    f"not from when it started (between {previous:.3f} and {now:.3f})",
                )
        else:
            due = self._input_time(truth, wait.until or "")
            if due is None or abs(until - due) > TOLERANCE:
                self.violation(order_id, f"the timer {name} waits until {until:.3f}, its input says {due}")
        window = self.window if wait.kind == "timer" else 0.0
        complete_by = at_seconds(after.complete_by) if after.complete_by is not None else None
        if (
            after.process_state is not ProcessState.WAITING
            or after.waiting_for != wait.kind
            or after.wait_until != step.complete_by
            or after.locked_by is not None
            or complete_by is None
            or abs(complete_by - until - window) > TOLERANCE
        ):
            self.violation(
                order_id,
                f"the task waiting at {name} is {after.process_state.value}, waiting for {after.waiting_for} "
                f"until {after.wait_until}, locked by {after.locked_by}, CompleteBy {after.complete_by}; its "
                f"{wait.kind} ends at {step.complete_by}",
            )

    def _passes_waits(self, truth: OrderTruth, index: int, now: float, what: str) -> None:
        """Step ``index`` runs (``what``: dispatched, or its call reached the service): every wait before it
        ended well, and a timer (unless an operator skipped it) not before its time. A wait rejected,
        expired or cancelled is never passed."""
        for i in range(min(index, len(truth.waits))):
            wait = truth.waits[i]
            if wait is None or i in truth.left_out:
                continue
            name, later = truth.steps[i], truth.steps[index]
            closed = truth.closed.get(i)
            if closed is not None:
                how, at = closed
                self.violation(
                    truth.order_id,
                    f"{later} {what} at {now:.3f}, but {name} {how} at {at:.3f}: a rejected or expired "
                    f"approval (or a wait cancelled) never reaches the next step",
                )
                return
            status = truth.views[i].status
            if status is not StepStatus.COMPLETED:
                self.violation(
                    truth.order_id,
                    f"{later} {what} while the {wait.kind} {name} is {status.value}, not ended",
                )
                return
            until = truth.until.get(i)
            if (
                wait.kind == "timer"
                and i not in truth.skipped
                and until is not None
                and now < until - TOLERANCE
            ):
                self.violation(
                    truth.order_id,
                    f"nothing runs before its timer: {later} {what} at {now:.3f}, the timer of {name} ends "
                    f"at {until:.3f}",
                )
                return

    # ---- groups: steps side by side ----------------------------------------------------------------
    def _joined(self, truth: OrderTruth, now: float) -> None:
        """After a save: a group all of whose steps are Completed or Left out has joined (first time)."""
        for group in truth.groups:
            done = len(group) > 1 and all(truth.views[i].status in _DONE for i in group)
            if done and group.start not in truth.joined:
                truth.joined[group.start] = now
                self.count("groups joined")

    def _passes_groups(self, truth: OrderTruth, index: int, now: float, what: str, *, joined: bool) -> None:
        """Step ``index`` runs (``what``: dispatched, or its call reached the service): every group before it
        has joined, all of its steps Completed (or Left out) first: no step after a group starts before all
        of the group has completed. A dispatch is judged on the save that makes it (``joined`` False: the
        group's steps as that very save left them), a call on the joins seen so far."""
        for group in {g for g in truth.groups[:index] if len(g) > 1 and g.stop <= index}:
            if group.start in truth.joined:
                continue
            if not joined and all(truth.views[i].status in _DONE for i in group):
                continue
            pending = ", ".join(
                f"{truth.steps[i]} {truth.views[i].status.value}"
                for i in group
                if truth.views[i].status not in _DONE
            )
            self.violation(
                truth.order_id,
                f"{truth.steps[index]} {what} at {now:.3f} before its group's steps had all completed "
                f"({pending}): no step after a group starts before all of the group has completed",
            )
            return

    def _wait_ended(
        self,
        truth: OrderTruth,
        before: TaskState,
        step: StepState,
        old: StepStatus,
        new: StepStatus,
        acts: set[str],
        now: float,
        decided: float,
    ) -> None:
        """A wait's outcome, applied once per attempt, and only as its kind allows: a timer is Completed by
        its wake-up once its time has come (at once when its turn came at or after its time), an approval by
        an approve; either by an operator's skip. An approval is Failed by a reject, or by the Supervisor
        once its deadline passed under policy compensate; any wait by a cancel. A wait Failed so is closed:
        nothing after it ever runs (:meth:`_passes_waits`)."""
        order_id, name, index = truth.order_id, step.name, step.index
        wait = _wait_of(truth, index)
        assert wait is not None
        until = truth.until.get(index)
        if new is StepStatus.COMPLETED and "skip" in acts and _skipped(step):
            truth.skipped.add(index)
            self.count("waits skipped")
            return
        if new is StepStatus.COMPLETED and old is StepStatus.NOT_STARTED:  # its time had come: done at once
            due = self._input_time(truth, wait.until or "") if wait.seconds is None else None
            if wait.kind != "timer":
                self.violation(
                    order_id, f"the approval {name} was Completed when its turn came: no one approved it"
                )
            elif wait.seconds is not None and wait.seconds > 0:
                self.violation(
                    order_id,
                    f"nothing runs before its timer: the timer of {name} was Completed as soon as its turn "
                    f"came, {wait.seconds:g} s early",
                )
            elif due is not None and now < due - TOLERANCE:
                self.violation(
                    order_id,
                    f"nothing runs before its timer: the timer of {name} ended at once at {now:.3f}, before "
                    f"its time {due:.3f}",
                )
            else:
                self.count("timers ended at once")
            truth.until[index] = now
            return
        key = (index, step.attempts)
        if key in truth.ended:
            self.violation(order_id, f"the wait {name} ended twice in attempt {step.attempts} ({new.value})")
        truth.ended.add(key)
        if new is StepStatus.COMPLETED:
            closed = truth.closed.get(index)
            if "reject" in acts or closed is not None:
                how = closed[0] if closed is not None else "was rejected"
                self.violation(
                    order_id,
                    f"{name} {how}, yet it became Completed: a rejected or expired approval never reaches "
                    f"the next step",
                )
            elif wait.kind == "approval":
                if "approve" not in acts:
                    self.violation(order_id, f"the approval {name} became Completed, but no one approved it")
                    return
                self.count("approvals approved")
                if before.process_state is ProcessState.ERROR:
                    self.count("approvals approved from Error")
                elif until is not None and decided >= until - TOLERANCE:
                    self.violation(
                        order_id,
                        f"the approval {name} was given at {decided:.3f}, at or past its deadline "
                        f"{until:.3f}: its policy applies (finding 13)",
                    )
            elif until is not None and now < until - TOLERANCE:
                by = f" (by an operator's {', '.join(sorted(acts))})" if acts else ""
                self.violation(
                    order_id,
                    f"nothing runs before its timer: the timer of {name} ended at {now:.3f}{by}, before its "
                    f"time {until:.3f}",
                )
            elif acts:
                self.violation(
                    order_id,
                    f"the timer {name} was ended by an operator's {', '.join(sorted(acts))}: a timer ends by "
                    f"its wake-up (or a skip)",
                )
            else:
                self.count("timers ended by their wake-up")
            return
        if "cancel" in acts:
            truth.closed[index] = ("was cancelled while waiting", now)
            self.count("cancelled while waiting")
            if step.last_error != CANCELLED_WAITING:
                self.violation(order_id, f"{name} was cancelled while waiting, but says {step.last_error!r}")
        elif "reject" in acts:
            truth.closed[index] = ("was rejected", now)
            if wait.kind != "approval":
                self.violation(
                    order_id, f"a reject ended the {wait.kind} {name}: only an approval is rejected"
                )
                return
            self.count("approvals rejected")
            if before.process_state is ProcessState.ERROR:
                self.count("approvals rejected from Error")
        elif acts:
            self.violation(order_id, f"the {wait.kind} {name} was Failed by an operator's {sorted(acts)}")
        elif wait.kind != "approval" or wait.on_deadline != "compensate":
            self.violation(
                order_id,
                f"the {wait.kind} {name} was Failed with no one acting: only an approval's deadline (policy "
                f"compensate) ends a wait so",
            )
        elif until is None or now < until - TOLERANCE:
            self.violation(
                order_id, f"the Supervisor applied {name}'s deadline at {now:.3f}, before it passed ({until})"
            )
        else:
            truth.closed[index] = ("expired", now)
            self.count("approvals expired")

    def _left_out(self, truth: OrderTruth, step: StepState, old: StepStatus) -> None:
        """A step saved as left out: only one not started, whose condition does not hold, with its reason."""
        self.count("steps left out")
        truth.left_out.add(step.index)
        condition = truth.conditions[step.index]
        if old is not StepStatus.NOT_STARTED:
            self.violation(truth.order_id, f"step {step.name} was left out once {old.value}")
        if condition is None:
            self.violation(truth.order_id, f"step {step.name} was left out, but it has no condition")
        elif self._runs(truth, step.index):
            self.violation(
                truth.order_id,
                f"step {step.name} was left out, but its condition holds ({condition.describe()})",
            )
        elif step.reason != LEFT_OUT_REASON + condition.describe():
            self.violation(
                truth.order_id,
                f"step {step.name} was left out with the reason {step.reason!r}, not its condition",
            )

    def _result_recorded(self, truth: OrderTruth, step: StepState) -> None:
        """A step Completed from its reply: what it records is what its service returned."""
        truth.returned.add(step.index)
        effect = self.ledger.get((truth.agents[step.index], f"{truth.order_id}:{step.name}"))
        returned = effect.returned if effect is not None else None
        if (step.result or {}) != (returned or {}):
            self.violation(
                truth.order_id,
                f"a result passed on is not the one returned: step {step.name} recorded {step.result}, "
                f"its service returned {returned}",
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
        truth.errored = None
        entry = next((e for e in audit if e.action == "error"), None)
        if entry is None:
            self.violation(order_id, "entered Error without an audit entry")
            return
        index, phase = after.current_step, after.phase
        if "is not deployed" in (entry.detail or ""):
            return
        if entry.actor.startswith("scheduler"):
            undo = truth.views[index].compensation_attempts
            if (index, True, undo, ReplyOutcome.FAILED) not in truth.replies:
                self.violation(order_id, f"Error for a failed undo of step {index} that no Agent reported")
            return
        if not entry.actor.startswith("supervisor"):
            self.violation(order_id, f"entered Error by {entry.actor}")
            return
        if entry.step in truth.steps and truth.steps.index(entry.step) in _group_of(truth, index):
            index = truth.steps.index(entry.step)  # a step of a group: the one whose timeouts it counted
        truth.errored = index
        wait = _wait_of(truth, index)
        if wait is not None and truth.views[index].status is StepStatus.WAITING:
            self._deadline_error(truth, index, wait, now)
            return
        attempts = truth.attempts.get((index, phase), [])
        service = truth.agents[index]
        counted = 0
        for i, attempt in enumerate(attempts):
            end = attempts[i + 1].dispatched_at if i + 1 < len(attempts) else now
            # An attempt whose service took it (202) timed out waiting for its callback: the breaker, which
            # says how the service answers calls, has nothing to hold it for.
            if attempt.complete_by <= now and (
                attempt.accepted or self._closed_between(service, attempt.complete_by, end)
            ):
                counted += 1
        if counted < self.max_failures:
            self.violation(
                order_id,
                f"the Supervisor put step {truth.steps[index]} ({phase.value}) in Error after "
                f"{counted} attempt(s) that timed out with the breaker closed (of {len(attempts)}); "
                f"the policy needs {self.max_failures}",
            )

    def _deadline_error(self, truth: OrderTruth, index: int, wait: WaitTruth, now: float) -> None:
        """The Supervisor put a waiting order in Error: only an approval past its deadline, policy error."""
        name, until = truth.steps[index], truth.until.get(index)
        if wait.kind != "approval" or wait.on_deadline != "error":
            self.violation(
                truth.order_id,
                f"the Supervisor put the {wait.kind} {name} in Error: only an approval's deadline does, "
                f"policy error",
            )
        elif until is None or now < until - TOLERANCE:
            self.violation(
                truth.order_id,
                f"the Supervisor applied {name}'s deadline at {now:.3f}, before it passed ({until})",
            )
        else:
            self.count("approvals expired")
            self.count("approvals expired into Error")

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

    # ---- liveness: the Supervisor, held to its policy and its schedule --------------------------------
    def start(self, limits: Limits, ledger: Mapping[tuple[str, str], Effect]) -> None:
        """The run starts: the settings its liveness invariants are held to, and the services' ledger."""
        self.limits = limits
        self.ledger = ledger

    def _watched(self, truth: OrderTruth, after: TaskState, now: float) -> None:
        """A save: the task's latest CompleteBy, and, in flight, a task the Supervisor must come back to."""
        truth.saves += 1
        if after.complete_by is not None:
            truth.latest_complete_by = max(truth.latest_complete_by, at_seconds(after.complete_by))
        if not after.process_state.in_flight:
            return
        if after.complete_by is None:
            self.violation(
                truth.order_id, f"{after.process_state.value} without a CompleteBy: nothing recovers it"
            )
            return
        self._pushed += 1
        heapq.heappush(self._due, (truth.latest_complete_by, self._pushed, truth.order_id, truth.saves, now))

    def may_watch_until(self, order_id: str) -> None:
        """A submission or an operator's action ended (answered or not): a watch entry it wrote carries a
        CompleteBy of its own, at most a budget from now, even if its task's write lost a race or never
        happened. The task's latest CompleteBy covers it, so the Supervisor's deadline does."""
        truth = self.orders.get(order_id)
        if truth is not None and self.limits is not None:
            truth.latest_complete_by = max(truth.latest_complete_by, self.now() + self.limits.complete_by)

    def sweep_started(self, started: float) -> None:
        """A sweep starts (it runs until :meth:`swept`)."""
        self._sweeping.append(started)

    def slack_now(self) -> float:
        """The scheduling slack: the longest a sweep has run since the faults stopped, a sweep still under
        way counted for as long as it has run so far."""
        now = self.now()
        return max([self.slack, *(now - started for started in self._sweeping)])

    def _sweeps_end(self, now: float) -> None:
        """Once the faults have stopped, a sweep ends within ``Limits.sweep_run`` (reported once, and no
        longer counted in the slack: a sweep that never ends must not put every bound off for ever)."""
        limits, quiet = self.limits, self.quiet_at
        if limits is None or quiet is None:
            return
        for started in [s for s in self._sweeping if now - max(s, quiet) > limits.sweep_run]:
            self._sweeping.remove(started)
            self.violation(
                "",
                f"the sweep that started at {started:.3f} was still running at {now:.3f}, longer than "
                f"{limits.sweep_run:.1f} s once the faults stopped",
            )

    def swept(self, started: float, error: BaseException | None) -> None:
        """A sweep that started at ``started`` ended (``error``: what it raised; a ``BaseException`` that is
        no ``Exception`` is its process's death, or the run's end). Once the faults have stopped, a sweep
        ends normally, and it recovers every task in flight whose latest CompleteBy had passed when it
        started (its watch entry was due, the task past its CompleteBy): each such task has changed since."""
        if started in self._sweeping:
            self._sweeping.remove(started)
        now = self.now()
        quiet = self.quiet_at
        if quiet is None or now <= quiet or (error is not None and not isinstance(error, Exception)):
            return
        self.slack = max(self.slack, now - started)
        if started < quiet:
            return
        if error is not None:
            self.violation("", f"the sweep that started at {started:.3f} failed with no fault: {error!r}")
            return
        kept: list[tuple[float, int, str, int, float]] = []
        while self._due and self._due[0][0] <= started:
            entry = heapq.heappop(self._due)
            latest, _, order_id, saves, saved_at = entry
            truth = self.orders[order_id]
            if truth.saves != saves or truth.state is None or not truth.state.in_flight:
                continue  # changed since
            if saved_at >= started:
                kept.append(entry)  # saved as the sweep started: the next sweep's
                continue
            if truth.latest_complete_by > started:  # raised since the save: due later
                kept.append((truth.latest_complete_by, *entry[1:]))
                continue
            self.violation(
                order_id,
                f"{truth.state.value} past its CompleteBy {latest:.3f}, and the sweep that started at "
                f"{started:.3f} ended at {now:.3f} without recovering it",
            )
        for entry in kept:
            heapq.heappush(self._due, entry)

    def _expiry_handled(
        self,
        truth: OrderTruth,
        before: TaskState,
        after: TaskState,
        steps: list[StepState],
        audit: list[AuditEntry],
        now: float,
    ) -> None:
        """The Supervisor's handling of an attempt past its CompleteBy. The policy counts the expiry when the
        attempt was not held and the service's breaker stayed closed from that CompleteBy to the save (the
        sweep read the breakers after the CompleteBy and before the save: it read it closed, and neither held
        nor released the task). Once a step has had ``max_failures`` of them in its phase since its count
        was last reset (an operator taking the order out of Error; the undo phase counts afresh), its
        handling is Error."""
        if (
            before.process_state is ProcessState.PROCESSING
            and before.phase is Phase.FORWARD
            and len(_group_of(truth, before.current_step)) > 1
        ):
            self._group_expiries(truth, before, after, steps, audit, now)
            return
        callback = before.process_state is ProcessState.WAITING and before.waiting_for == "callback"
        if before.process_state not in (ProcessState.PROCESSING, ProcessState.COMPENSATING) and not callback:
            return
        if before.locked_by is None or before.complete_by is None or before.hold_end is not None:
            return  # waiting for a Scheduler (a lost command is sent again, not counted), or held
        deadline = at_seconds(before.complete_by)
        index, phase = before.current_step, before.phase
        running = StepStatus.RUNNING if phase is Phase.FORWARD else StepStatus.COMPENSATING
        if callback:
            running = StepStatus.WAITING
        if deadline > now or truth.views[index].status is not running:
            return
        if after.current_step != index or after.phase is not phase or after.attempt != before.attempt:
            return  # a reply moved it on
        if any(step.index == index and step.status is not running for step in steps):
            return
        supervisor_error = after.process_state is ProcessState.ERROR and any(
            e.action == "error" and e.actor.startswith("supervisor") for e in audit
        )
        acted = any(e.action not in ENGINE_ENTRIES for e in audit)
        if not supervisor_error and (acted or (after.locked_by is not None and after.hold_end is None)):
            return  # an operator's action, or not given back
        if not callback and not self._closed_throughout(truth.agents[index], deadline, now):
            return  # the Supervisor may have held or released it, uncounted (a callback's wait is not held)
        key = (index, phase)
        counted = truth.expiries[key] = truth.expiries.get(key, 0) + 1
        if counted >= self.max_failures and after.process_state is not ProcessState.ERROR:
            self.violation(
                truth.order_id,
                f"the Supervisor gave step {truth.steps[index]} ({phase.value}) back "
                f"({before.process_state.value} -> {after.process_state.value}) after {counted} timeouts the "
                f"policy counts (each past its CompleteBy, the breaker closed until the Supervisor came); "
                f"the policy puts it in Error at {self.max_failures}",
            )

    def _group_expiries(
        self,
        truth: OrderTruth,
        before: TaskState,
        after: TaskState,
        steps: list[StepState],
        audit: list[AuditEntry],
        now: float,
    ) -> None:
        """The Supervisor's recovery of the steps of a group, each on its own: a step in flight past its
        CompleteBy (not one waiting for a Scheduler to dispatch it again) that the save asks again, or names
        in its Error. Its timeout counts as for a single step (not held: the breaker closed from that
        CompleteBy to the save; a callback awaited counts whatever the breaker), and once a step has had
        ``max_failures`` of them since its count was last reset, its recovery is Error."""
        if any(e.action not in ENGINE_ENTRIES for e in audit):
            return  # an operator's action
        errors = [e for e in audit if e.action == "error" and e.actor.startswith("supervisor")]
        named = {e.step for e in errors}
        changed = {s.index: s for s in steps}
        for i in _group_of(truth, before.current_step):
            view = truth.views[i]
            if view.status not in (StepStatus.RUNNING, StepStatus.WAITING) or view.retry_at is not None:
                continue
            if view.complete_by is None or at_seconds(view.complete_by) > now:
                continue
            step = changed.get(i)
            asked = step is not None and step.retry_at is not None and step.attempts == view.attempts
            if not asked and truth.steps[i] not in named:
                continue
            deadline = at_seconds(view.complete_by)
            waited = view.status is StepStatus.WAITING
            if not waited and not self._closed_throughout(truth.agents[i], deadline, now):
                continue  # the Supervisor may have held it for its breaker, uncounted
            key = (i, Phase.FORWARD)
            counted = truth.expiries[key] = truth.expiries.get(key, 0) + 1
            if counted >= self.max_failures and after.process_state is not ProcessState.ERROR:
                self.violation(
                    truth.order_id,
                    f"the Supervisor asked for step {truth.steps[i]} of a group again after {counted} "
                    f"timeouts the policy counts (each past its CompleteBy, the breaker closed until the "
                    f"Supervisor came); the policy puts it in Error at {self.max_failures}",
                )

    def _closed_throughout(self, service: str, start: float, end: float) -> bool:
        """Whether the service's breaker was closed from ``start`` to ``end`` (closed if never written)."""
        history = self.breakers.get(service, [])
        first = bisect.bisect_right(history, start, key=lambda write: write[0])
        if first and not history[first - 1][1]:
            return False
        for t, is_closed in history[first:]:
            if t > end:
                break
            if not is_closed:
                return False
        return True

    # ---- liveness: operator actions ------------------------------------------------------------------
    def _acted(
        self,
        truth: OrderTruth,
        before: TaskState,
        after: TaskState,
        steps: list[StepState],
        audit: list[AuditEntry],
        now: float,
    ) -> list[str]:
        """Who moved the order: a Scheduler that took it out of Pending; the undo phase beginning (its counts
        start afresh); an operator's (or the application's) action, with the count it resets and its
        effect. Returns what the actions saved fail to show of their effect (the caller reports it)."""
        was, became = before.process_state, after.process_state
        if was is ProcessState.PENDING and became is not ProcessState.PENDING:
            truth.left_pending_at = now
        if before.phase is Phase.FORWARD and after.phase is Phase.COMPENSATE:
            for key in [k for k in truth.expiries if k[1] is Phase.COMPENSATE]:
                del truth.expiries[key]
        actions = [entry for entry in audit if entry.action not in ENGINE_ENTRIES]
        problems: list[str] = []
        if not actions:
            return problems
        truth.acted_at = now
        running = [i for i, view in enumerate(truth.views) if view.status is StepStatus.RUNNING]
        if any(e.action == "cancel" for e in actions) and not all(_undoable(truth, i) for i in running):
            self.count("cancelled while a step without undo ran")
        if was is ProcessState.ERROR and became is not ProcessState.ERROR:
            truth.expiries.pop((before.current_step, before.phase), None)  # the operator took over
            for i, view in enumerate(truth.views):
                if view.status in (StepStatus.RUNNING, StepStatus.WAITING):
                    # Every step in flight is counted afresh too (transitions.operator._operator_took_over).
                    truth.expiries.pop((i, before.phase), None)
            errored, truth.errored = truth.errored, None
            if errored is not None and errored != before.current_step:
                # A step of a group put it there: its count is the one the operator resets.
                truth.expiries.pop((errored, before.phase), None)
                truth.attempts[(errored, before.phase)] = []
        for entry in actions:
            token = _token(entry.note)
            found = self.acts.get(token) if token is not None else None
            if found is None or found[0] != truth.order_id:
                continue
            act = found[1]
            act.saved_at, act.after = now, became
            act.index, act.phase = before.current_step, before.phase
            named = truth.steps.index(act.step) if act.step in truth.steps else None
            if named is not None and named in _group_of(truth, before.current_step):
                act.index = named  # any step of the group that is the current step
            view = truth.views[act.index]
            act.attempts = view.attempts if act.phase is Phase.FORWARD else view.compensation_attempts
            problem = self._effect(truth, act, before, after, steps, now)
            if problem:
                problems.append(f"the {act.name} was saved as done, but {problem}")
        return problems

    def _effect(
        self,
        truth: OrderTruth,
        act: OperatorAct,
        before: TaskState,
        after: TaskState,
        steps: list[StepState],
        now: float,
    ) -> str | None:
        """What the saved action fails to show of its effect (None: it shows it), as ``engine.tasks`` and
        ``engine.transitions`` promise it."""
        was, became = before.process_state, after.process_state
        step = next((s for s in steps if s.index == act.index), None)
        fresh = after.complete_by is not None and at_seconds(after.complete_by) > now
        wait = _wait_of(truth, act.index)
        act.wait = wait is not None
        if (
            act.what in ("extend", "retry", "skip")
            and len(_group_of(truth, act.index)) > 1
            and was is ProcessState.PROCESSING
            and before.phase is Phase.FORWARD
        ):
            return self._effect_in_group(truth, act, before, after, step, now)
        if act.what == "extend":
            old = truth.views[act.index].complete_by
            new = step.complete_by if step is not None else old
            asked = act.seconds or 0.0
            if old is None or new is None or abs(at_seconds(new) - at_seconds(old) - asked) > 1e-3:
                return f"its CompleteBy went from {old} to {new}, not {asked:g} s later"
            if wait is not None:  # a later time or deadline, nothing re-sent
                window = self.window if wait.kind == "timer" else 0.0
                task_by = at_seconds(after.complete_by) if after.complete_by is not None else None
                if (
                    task_by is None
                    or abs(task_by - at_seconds(new) - window) > 1e-3
                    or after.wait_until != new
                    or became is not was
                    or after.attempt != before.attempt
                ):
                    return (
                        f"the task is {became.value}, attempt {after.attempt}, waiting until "
                        f"{after.wait_until}, CompleteBy {after.complete_by}"
                    )
                if act.index in truth.until:
                    truth.until[act.index] += asked
                self.count("waits extended")
                return None
            if after.complete_by != new or became is not was or after.attempt != before.attempt:
                return f"the task is {became.value}, attempt {after.attempt}, CompleteBy {after.complete_by}"
            if was is ProcessState.WAITING:  # a callback awaited: later, nothing re-sent (the service has it)
                if after.wait_until != new or after.waiting_for != "callback":
                    return f"the task waits for {after.waiting_for} until {after.wait_until}"
                self.count("callback waits extended")
                return None
            act.complete_by = at_seconds(new)
        elif act.what == "retry":
            wanted = ProcessState.PENDING if before.phase is Phase.FORWARD else ProcessState.COMPENSATING
            if (
                became is not wanted
                or after.locked_by is not None
                or not fresh
                # a step of a group is handed back at its group's first step (where a claim dispatches it all)
                or after.current_step != _group_of(truth, act.index).start
            ):
                return (
                    f"the task is {became.value}, locked by {after.locked_by}, CompleteBy {after.complete_by}"
                )
            if was is ProcessState.ERROR and step is not None and step.failures:
                return f"its failure count was not reset ({step.failures})"
        elif act.what == "skip":
            if step is None or step.status is not StepStatus.COMPLETED or not _skipped(step):
                if step is None:
                    return "the step is unchanged"
                return f"the step is {step.status.value}, result {step.result}, reason {step.reason!r}"
            if became is not ProcessState.PENDING or not fresh:
                return f"the task is {became.value}, CompleteBy {after.complete_by}: not handed back"
        elif act.what == "resubmit":
            if was is not ProcessState.ERROR or became is not ProcessState.PENDING or not fresh:
                return f"the task went {was.value} -> {became.value}, CompleteBy {after.complete_by}"
        elif act.what == "approve":
            if step is None or step.status is not StepStatus.COMPLETED or step.reason != "approved":
                return "the step is unchanged" if step is None else f"the step is {step.status.value}"
            if became is not ProcessState.PENDING or after.locked_by is not None or not fresh:
                return f"the task is {became.value}, CompleteBy {after.complete_by}: not handed back"
            if was is ProcessState.ERROR and (step.failures or after.alert_pending):
                return f"it left Error with {step.failures} failures, its alert pending {after.alert_pending}"
        elif act.what == "reject":
            if step is None or step.status is not StepStatus.FAILED:
                return "the step is unchanged" if step is None else f"the step is {step.status.value}"
            if not (step.last_error or "").startswith("rejected"):
                return f"the step says {step.last_error!r}"
            if became is not ProcessState.COMPENSATING or after.phase is not Phase.COMPENSATE or not fresh:
                return f"the task is {became.value} ({after.phase.value}), CompleteBy {after.complete_by}"
        elif act.what == "cancel":
            undone = became in (ProcessState.COMPENSATING, ProcessState.COMPENSATED)
            if after.phase is not Phase.COMPENSATE or not undone:
                return f"the task went {was.value} -> {became.value} ({after.phase.value})"
        return None

    def _effect_in_group(
        self,
        truth: OrderTruth,
        act: OperatorAct,
        before: TaskState,
        after: TaskState,
        step: StepState | None,
        now: float,
    ) -> str | None:
        """An operator's action on a step of a group that runs (``engine.transitions``): an extend moves that
        step's CompleteBy by what was asked (a call re-sent with it, nothing for a callback awaited); a retry
        asks a Scheduler to dispatch that step again now, the others running on; a skip completes it, and
        hands the task back only when none of its group is still in flight. The task stays at the group."""
        became = after.process_state
        view = truth.views[act.index]
        if act.what == "extend":
            old, new = view.complete_by, step.complete_by if step is not None else view.complete_by
            asked = act.seconds or 0.0
            if old is None or new is None or abs(at_seconds(new) - at_seconds(old) - asked) > 1e-3:
                return f"its CompleteBy went from {old} to {new}, not {asked:g} s later"
            if became is not ProcessState.PROCESSING or after.current_step != before.current_step:
                return f"the task is {became.value} at step {after.current_step}"
            act.beside = True
            if view.status is StepStatus.WAITING:
                self.count("callback waits extended")
                return None
            act.complete_by = at_seconds(new)
            self.count("steps of a group extended")
            return None
        if act.what == "retry":
            # Asked again at the time the operator's request read the clock: after it was asked, by the save
            # (a slow store puts seconds between the two).
            again = at_seconds(step.retry_at) if step is not None and step.retry_at is not None else None
            if again is None or not act.asked_at - 1e-3 <= again <= now + 1e-3:
                return f"the step is not asked again now (retry at {step.retry_at if step else None})"
            if became is not ProcessState.PROCESSING or after.current_step != before.current_step:
                return f"the task is {became.value} at step {after.current_step}"
            act.beside = True
            self.count("steps of a group retried by an operator")
            return None
        if step is None or step.status is not StepStatus.COMPLETED or not _skipped(step):
            if step is None:
                return "the step is unchanged"
            return f"the step is {step.status.value}, result {step.result}, reason {step.reason!r}"
        in_flight = [
            i
            for i in _group_of(truth, act.index)
            if i != act.index and truth.views[i].status in (StepStatus.RUNNING, StepStatus.WAITING)
        ]
        if in_flight:
            if became is not ProcessState.PROCESSING:
                return f"the task is {became.value}, while {truth.steps[in_flight[0]]} of its group runs"
            act.beside = True
            self.count("steps of a group skipped while others ran")
            return None
        fresh = after.complete_by is not None and at_seconds(after.complete_by) > now
        if became is not ProcessState.PENDING or not fresh:
            return f"the task is {became.value}, CompleteBy {after.complete_by}: not handed back"
        return None

    def operator_asked(self, order_id: str, what: str, step: str | None, seconds: float | None) -> int:
        """An action about to be sent; the token it returns goes in the audit entry's note."""
        token = len(self.acts) + 1
        act = OperatorAct(token, what, step, seconds, self.now())
        self.acts[token] = (order_id, act)
        truth = self.orders.get(order_id)
        if truth is not None:
            truth.acts.append(act)
        return token

    def operator_answered(self, order_id: str, token: int, done: bool) -> None:
        """The action's call ended: answered as done (``done``), refused, or not answered. An answer of done
        comes after the change was saved and what it decided was sent."""
        act = self.acts[token][1]
        truth = self.orders[order_id]
        self.may_watch_until(order_id)
        if self.quiet_at is not None and truth.acted_at >= act.asked_at:
            self._bound_from(truth, self.now())  # saved after the faults stopped: its bound starts again
        if not done:
            return
        act.answered = True
        if act.saved_at is None:
            # Only a cancel is done without a change: of an order already being undone.
            if act.what != "cancel" or truth.phase is not Phase.COMPENSATE:
                self.violation(order_id, f"the {act.name} was answered as done, but nothing was saved")
            return
        if act.what == "extend":
            key = (act.index, act.phase is Phase.COMPENSATE, act.attempts)
            if act.complete_by is not None and truth.requests.get(key, 0.0) < act.complete_by - 1e-3:
                self.violation(
                    order_id,
                    f"the {act.name} was answered as done, but no request of attempt {act.attempts} carries "
                    f"its new deadline {act.complete_by:.3f}",
                )
        elif act.beside and act.what != "retry":
            return  # a skip of a step of a group whose others run on: nothing to send
        elif act.after is not ProcessState.COMPENSATED and truth.commands_at < act.saved_at:
            self.violation(order_id, f"the {act.name} was answered as done, but no command was sent")

    # ---- liveness: every order terminal within its bound ----------------------------------------------
    def faults_stopped(self) -> None:
        """The faults stop: every order in flight has its bound from now."""
        now = self.quiet_at = self.finished_at = self.now()
        for truth in self.orders.values():
            self._bound_from(truth, now)

    def _bound_from(self, truth: OrderTruth, start: float) -> None:
        """The order's bound starts at ``start`` (the faults stopped, or an action on it was saved since),
        from its work in hand then."""
        state = truth.state
        truth.late = False
        if state is None or not state.in_flight:
            truth.bound = None
            return
        ahead = 0.0  # the waits not started yet: a timer's time, an approval's deadline
        if truth.phase is Phase.FORWARD:
            for j in range(truth.current_step, len(truth.waits)):
                if truth.waits[j] is not None and truth.views[j].status is StepStatus.NOT_STARTED:
                    ahead += self.wait_length(truth, j, start)
        truth.bound = (start, truth.latest_complete_by, truth.current_step, truth.phase, ahead)

    def terminal_by(self, truth: OrderTruth) -> float | None:
        """When the order must be terminal (None: no bound, it was terminal when the faults stopped), from
        its work in hand when its bound started and what the run has shown since: the steps left to run
        (forward, then undone if a service already rejected one of them: no other step can fail once the
        faults stopped) and the breakers of their services that were open then or opened since. The waits
        ahead add their durations; an approval ahead may end the order's way forward there (rejected, or
        expired), and then the steps before it are undone."""
        if truth.bound is None or self.limits is None:
            return None
        start, latest, index, phase, ahead = truth.bound
        if phase is Phase.COMPENSATE:
            steps = range(index + 1)
            phases = index + 1
        else:
            last = len(truth.steps) - 1
            failing = next((j for j in range(index, last + 1) if self._rejected(truth, j)), None)
            steps = range(last + 1) if failing is not None else range(index, last + 1)
            phases = last + 1 - index if failing is None else (failing - index + 1) + (failing + 1)
            ends = [
                (j - index + 1) + (j + 1)
                for j in range(index, failing if failing is not None else last + 1)
                if (wait := truth.waits[j]) is not None and wait.kind == "approval"
            ]
            if ends:
                steps, phases = range(last + 1), max(phases, *ends)
        holds = sum(self._openings(service, start) for service in {truth.agents[i] for i in steps})
        return start + self.limits.terminal(start, latest, phases, holds, self.slack_now(), ahead)

    def _rejected(self, truth: OrderTruth, index: int) -> bool:
        """Whether the step's service has decided to reject its key for good (decided when its first call
        lands, so only while the faults lasted)."""
        effect = self.ledger.get((truth.agents[index], f"{truth.order_id}:{truth.steps[index]}"))
        return effect is not None and bool(effect.rejected)

    def _openings(self, service: str, start: float) -> int:
        """How many times the service's breaker was open (or a trial call under way) from ``start`` on: when
        it was not closed then, and each write since that left it so."""
        history = self.breakers.get(service, [])
        first = bisect.bisect_right(history, start, key=lambda write: write[0])
        opened = int(first > 0 and not history[first - 1][1])
        return opened + sum(1 for _, is_closed in history[first:] if not is_closed)

    def check_deadlines(self) -> None:
        """The sweeps that run too long, and the orders past their bound (called while the run settles)."""
        now = self.now()
        self._sweeps_end(now)
        for truth in self.orders.values():
            if truth.late or truth.state is None or truth.state.terminal:
                continue
            due = self.terminal_by(truth)
            if due is not None and now > due:
                self._terminal_late(truth, due, None)

    def latest_due(self) -> float:
        """The latest the Supervisor may have to come to an order: the bound of one still in flight, when
        the last one that had a bound became terminal, and the latest CompleteBy of a terminal one (its
        watch entry comes due no later; then the Supervisor moves it to the history, or raises its alert)."""
        latest = self.finished_at
        for truth in self.orders.values():
            if truth.state is None or truth.state.terminal:
                latest = max(latest, truth.latest_complete_by)
            elif truth.bound is not None:
                latest = max(latest, self.terminal_by(truth) or latest)
        return latest

    def _terminal_on_time(self, truth: OrderTruth, now: float) -> None:
        if truth.bound is not None:
            self.finished_at = max(self.finished_at, now)
        due = self.terminal_by(truth)
        if due is not None and not truth.late and now > due:
            self._terminal_late(truth, due, now)

    def _terminal_late(self, truth: OrderTruth, due: float, at: float | None) -> None:
        truth.late = True
        state = truth.state.value if truth.state is not None else "never created"
        self.violation(
            truth.order_id,
            f"still {state} at its bound {due:.1f}"
            if at is None
            else f"{state} only at {at:.1f}, after its bound {due:.1f}",
        )

    def creation_taken_back(self, order_id: str) -> None:
        truth = self.orders[order_id]
        truth.saves += 1
        truth.created -= 1
        truth.state = truth.state_before_creation
        self.note(order_id, "creation taken back: the id is in the history")

    def parked(self, order_id: str, state: TaskState) -> None:
        """The order's live records went, its parked copy written before (not a change of its state)."""
        truth = self.orders.get(order_id)
        self.count("orders parked")
        if truth is None:
            self.violation(order_id, "a task the client never submitted was parked")
            return
        truth.parks += 1
        if truth.state is not state.process_state:
            self.violation(
                order_id,
                f"parked as {state.process_state.value}, but its last save left it {truth.state}",
            )
        self.note(order_id, "parked waiting for {} until {}", state.waiting_for, state.wait_until)

    def returned(self, order_id: str, how: str) -> None:
        """The order's live records were written again from its parked copy (its change follows)."""
        self.count("parked orders returned")
        self.count(f"parked orders returned {how}")
        self.note(order_id, "returned from its parked copy {}", how)

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
            truth = self.orders.get(body.order_id)
            if truth is not None:
                key = (body.step_index, body.compensating, body.attempt)
                truth.requests[key] = max(truth.requests.get(key, 0.0), at_seconds(body.complete_by))
            self.note(
                body.order_id,
                "request {} undo={} #{} until {}",
                body.step_index,
                body.compensating,
                body.attempt,
                body.complete_by,
            )
        elif isinstance(body, SchedulerCommand):
            truth = self.orders.get(body.order_id)
            if truth is not None:
                truth.commands_at = self.now()
            if body.kind is CommandKind.WAKE:
                reason = body.reason
                self.count(
                    "wake-ups re-sent by the Supervisor"
                    if reason.startswith("supervisor")
                    else "wake-ups that came early, scheduled again"
                    if "early" in reason
                    else "wake-ups scheduled"
                )
            self.note(body.order_id, "command {} {}", body.kind.value, body.reason)
        elif isinstance(body, bytes):
            self.poison_sent += 1
        else:
            self.status_messages += 1
            if isinstance(body, StatusMessage):
                self._status_sent(message, body)

    def _status_sent(self, message: Message, body: StatusMessage) -> None:
        """Each storefront's status queue receives only its own orders' statuses, under the id it gave (an
        order of no storefront's go to the shared queue). The order is the one the message's id names (the
        engine's duplicate-detection id starts with the task's id)."""
        order_id = message.message_id.split(":", 1)[0]
        truth = self.orders.get(order_id)
        if truth is None:
            self.violation(order_id, f"a status message of no order submitted, on {message.queue}")
            return
        queue = queues.status_queue(truth.storefront) if truth.storefront else queues.STATUS_QUEUE
        if message.queue != queue or body.order_id != truth.client_id:
            self.violation(
                order_id,
                f"a storefront's status queue receives only its own orders' statuses: {body.event.value} of "
                f"{order_id} went to {message.queue} as {body.order_id} (its own: {queue}, as "
                f"{truth.client_id})",
            )
            return
        truth.statuses.add(body.event.value)
        self.note(order_id, "status {} to {}", body.event.value, message.queue)

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
        index = effect.step_index
        if len(_group_of(truth, index)) > 1 and _undoable(truth, index) and effect.undone_before_applied:
            # Its own undo landed first and found nothing: the effect stays (a decision slower than the
            # budget, a fault, is withdrawn by the undo instead: never applied).
            self.violation(
                effect.order_id,
                f"{effect.key}, a step of a group, was applied after its own undo landed (and found nothing "
                f"to undo): a failed or cancelled group lets its steps settle before it is undone",
            )
        if not _undoable(truth, index) and truth.first_undo_at is not None:
            self.violation(
                effect.order_id,
                f"{effect.key}, which cannot be undone, was applied after an undo of its order landed "
                f"(at {truth.first_undo_at:.3f}): the undo did not wait for it",
            )

    def effect_undone(self, effect: Effect) -> None:
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        self.note(effect.order_id, "undone {} {}", effect.service, effect.key)
        if truth.first_undo_at is None:
            truth.first_undo_at = self.now()
        for other in truth.effects:
            if (
                other.step_index > effect.step_index
                and other.applied_at is not None
                and other.compensated_at is None
                and _undoable(truth, other.step_index)
            ):
                self.violation(
                    effect.order_id,
                    f"{effect.key} was undone while {other.key}, a later step, was still applied",
                )

    def called(self, effect: Effect, compensating: bool, carried: Mapping[str, Any]) -> None:
        """A call reached a service, carrying ``carried``: the result values its body reads, by name (None:
        one it goes without)."""
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        index = effect.step_index
        if carried:
            self.note(effect.order_id, "call {} undo={} carried {}", effect.key, compensating, dict(carried))
        if index >= len(truth.steps):
            return  # under the key of no step: reported when the run has settled
        if index in truth.left_out or not self._runs(truth, index):
            self.violation(
                effect.order_id,
                f"{effect.key} was called{' to undo it' if compensating else ''}, but its condition does not "
                f"hold ({self._condition(truth, index)}): a step left out by its condition is never called",
            )
        if not compensating:
            self._passes_waits(truth, index, self.now(), "was called")
            self._passes_groups(truth, index, self.now(), "was called", joined=True)
        for name, value in carried.items():
            producer = truth.producers.get(name)
            expected = self._returned(truth, producer).get(name) if producer is not None else None
            if value is not None:
                self.count("result values passed on")
            if value != expected:
                made = truth.steps[producer] if producer is not None else "no step"
                self.violation(
                    effect.order_id,
                    f"a result passed on is not the one returned: the {'undo' if compensating else 'call'} "
                    f"of {truth.steps[index]} carried {name}={value!r}, {made} returned {expected!r}",
                )

    def withdrawn(self, effect: Effect, taken_at: float, decide_at: float, due: float, slow: bool) -> None:
        """An undo reached a service while it was still deciding the step's apply, which it took at
        ``taken_at`` and would have decided at ``decide_at``, within the CompleteBy ``due`` of the dispatch
        it took, unless ``slow``. Only a decision slower than the budget may be overtaken so: a cancel (or a
        skip) undoes a step waiting for its callback only once its CompleteBy plus the grace has passed."""
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        self.note(effect.order_id, "withdrawn {} by its undo (taken at {:.3f})", effect.key, taken_at)
        if not slow:
            self.violation(
                effect.order_id,
                f"an undo of {effect.key} reached {effect.service} while it was still deciding the apply it "
                f"took at {taken_at:.3f}, due by its CompleteBy {due:.3f} (it would have decided at "
                f"{decide_at:.3f}): the undo did not wait for the callback",
            )

    # ---- alerts ----------------------------------------------------------------------------------------
    def alerted(self, order_id: str) -> None:
        truth = self.orders.get(order_id)
        if truth is None:
            self.alerts_unmatched += 1
            return
        truth.alerts += 1
        truth.alert_owed = False


_DONE = (StepStatus.COMPLETED, StepStatus.LEFT_OUT)  # a step of a group the join counts as done


def _group_of(truth: OrderTruth, index: int) -> range:
    """The steps of step ``index``'s group, itself included (just it in no group, or a key of no step)."""
    return truth.groups[index] if index < len(truth.groups) else range(index, index + 1)


def _wait_of(truth: OrderTruth, index: int) -> WaitTruth | None:
    """The order's step ``index``'s wait (None: a step that calls a service, or a key of no step)."""
    return truth.waits[index] if index < len(truth.waits) else None


def _undoable(truth: OrderTruth, index: int) -> bool:
    """Whether the order's step ``index`` has an undo action (a key of no step: as if it had)."""
    return truth.undoable[index] if index < len(truth.undoable) else True


def _skipped(step: StepState) -> bool:
    """Whether a Completed step was skipped by an operator: no result, and the operator's reason."""
    return step.result is None and (step.reason or "").startswith(SKIP_REASON)


def _token(note: str | None) -> int | None:
    """The token of an action the simulation's operator sent (its note says ``simulated #<token>``)."""
    if note is None or not note.startswith(OPERATOR_NOTE):
        return None
    return int(note.removeprefix(OPERATOR_NOTE))


class AlertHandler(logging.Handler):
    """Catches the engine's ``OrderEnteredError`` events (the alert an operator gets)."""

    def __init__(self, oracle: Oracle) -> None:
        super().__init__(logging.ERROR)
        self.oracle = oracle

    def emit(self, record: logging.LogRecord) -> None:
        fields: Any = record.__dict__
        if fields.get("microsoft.custom_event.name") == ORDER_ENTERED_ERROR:
            self.oracle.alerted(str(fields.get("orderId")))


def _as_submitted(claimed: TaskState, window: float) -> TaskState:
    """The Pending state record a task written claimed was submitted with (``transitions.new_record_state``:
    unlocked, at its first step, a ``CompleteBy`` ``window`` seconds after its creation)."""
    created = claimed.created_at
    return TaskState(
        order_id=claimed.order_id,
        workflow=claimed.workflow,
        workflow_version=claimed.workflow_version,
        submitter=claimed.submitter,
        status_queue=claimed.status_queue,
        search=claimed.search,
        trace_parent=claimed.trace_parent,
        complete_by=created + timedelta(seconds=window),
        created_at=created,
        updated_at=created,
        step_since=created,
    )
