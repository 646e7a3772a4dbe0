"""The state machine (the invariants' list: :mod:`simulation.oracle`): on every committed change of a task's
state record, it follows ``engine.machine.TABLE`` and a finished task never changes again; a step's attempts
never go back; a step's outcome was reported by that very attempt, and recorded once; a step is left out
only when its condition does not hold; every audit entry describes its change; a task is created once. Each
save is handed to the other families from here (:meth:`Machine.state_saved`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from engine import machine
from engine.messages import ReplyOutcome
from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState

from ..loop import at_seconds
from .core import (
    CANCELLED_WAITING,
    ENGINE_ENTRIES,
    LEFT_OUT_REASON,
    UNDONE_WITH_GROUP,
    Attempt,
    OrderTruth,
    _group_of,
    _skipped,
    _undoable,
    _wait_of,
)
from .ledger import Ledger
from .operators import Operators

_LEGAL: set[tuple[ProcessState, ProcessState]] = {
    (row.source, target) for row in machine.TABLE for target in row.target_states
}


class Machine(Ledger, Operators):
    """The invariants of the state machine, and the store's changes as they reach the oracle."""

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

    def creation_taken_back(self, order_id: str) -> None:
        truth = self.orders[order_id]
        truth.saves += 1
        truth.created -= 1
        truth.state = truth.state_before_creation
        self.note(order_id, "creation taken back: the id is in the history")

    def watch_written(self, order_id: str, complete_by: datetime | None, created: bool, cause: str) -> None:
        if created:
            self.watch_created[cause] = self.watch_created.get(cause, 0) + 1
        self.note(order_id, "watch {}: {}", cause, complete_by)


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
