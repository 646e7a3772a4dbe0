"""The oracle's shared core: what the simulation knows of each order (:class:`OrderTruth`, its steps' views,
attempts, waits and the operator's actions), the violations and counts of a run, the order's own trace, the
order's results and conditions from the simulation's own record, and the breakers' history. Every family of
invariants (:mod:`simulation.oracle`) builds on :class:`OracleCore`."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.breaker import BreakerRecord, BreakerState
from engine.conditions import Condition, value_at
from engine.messages import ReplyOutcome
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus
from engine.waits import APPROVAL, TIMER, WaitKind
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition

from ..liveness import Limits
from ..loop import at_seconds
from ..services import Effect

OPERATOR_NOTE = "simulated #"  # an operator action's note, with its token
SKIP_REASON = "skipped by an operator: "  # a skipped step's reason, before the operator's note
LEFT_OUT_REASON = "condition not met: "  # a left-out step's reason, before its condition in words
ENGINE_ENTRIES = ("error", "left out")  # audit entries the engine writes of its own accord (no one acted)
CANCELLED_WAITING = "cancelled while waiting"  # a wait's error when a cancel ended it
UNDONE_WITH_GROUP = "undone with its group"  # a step of a group waiting for its callback when another failed
TOLERANCE = 1e-6  # a datetime's microsecond, in the virtual seconds the oracle compares


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

    kind: WaitKind  # TIMER or APPROVAL (engine.waits)
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
    # updates: each input field an update may change, by the step that fences it (its index: from it on,
    # every call must carry the value it keeps); and the value the first call from its fence on carried
    fences: dict[str, int] = field(default_factory=dict)
    fenced: dict[str, Any] = field(default_factory=dict)


class OracleCore:
    """Collects the ground truth and the violations of one run: the state every family of invariants reads
    and writes, and the helpers they share."""

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
                fences={
                    name: [s.name for s in definition.steps].index(update.until)
                    for update in definition.updates
                    for name in update.fields
                },
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
            return WaitTruth(TIMER, seconds, wait.until)
        if isinstance(wait, Approval):
            seconds = self.wait_seconds.get(wait.setting or "", wait.deadline_seconds)
            return WaitTruth(APPROVAL, seconds, on_deadline=wait.on_deadline)
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

    # ---- the run, the breakers, the alerts ---------------------------------------------------------------
    def start(self, limits: Limits, ledger: Mapping[tuple[str, str], Effect]) -> None:
        """The run starts: the settings its liveness invariants are held to, and the services' ledger."""
        self.limits = limits
        self.ledger = ledger

    def breaker_written(self, record: BreakerRecord) -> None:
        self.breakers.setdefault(record.service, []).append((self.now(), record.state is BreakerState.CLOSED))

    def breakers_unreadable(self) -> None:
        self.unreadable.append(self.now())

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

    def _openings(self, service: str, start: float) -> int:
        """How many times the service's breaker was open (or a trial call under way) from ``start`` on: when
        it was not closed then, and each write since that left it so."""
        history = self.breakers.get(service, [])
        first = bisect.bisect_right(history, start, key=lambda write: write[0])
        opened = int(first > 0 and not history[first - 1][1])
        return opened + sum(1 for _, is_closed in history[first:] if not is_closed)

    def alerted(self, order_id: str) -> None:
        truth = self.orders.get(order_id)
        if truth is None:
            self.alerts_unmatched += 1
            return
        truth.alerts += 1
        truth.alert_owed = False


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
