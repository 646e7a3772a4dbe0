"""Waits: timers, approvals and callbacks (the invariants' list: :mod:`simulation.oracle`). A wait starts as
the run set it and the task says so; its outcome is applied once per attempt and only as its kind allows;
nothing runs before its timer, nor past a wait rejected, expired or cancelled; a step that calls a service
waits only for its callback, and the callback route takes a callback only for the dispatch the order waited
for (its fence, read here from the oracle's own record of what the order waited for, never from the route's
code)."""

from __future__ import annotations

from typing import Any

from engine.messages import ReplyOutcome
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskState
from engine.waits import APPROVAL, CALLBACK, TIMER

from ..loop import at_seconds
from ..services import Effect
from .core import (
    CANCELLED_WAITING,
    TOLERANCE,
    OracleCore,
    OrderTruth,
    WaitTruth,
    _group_of,
    _skipped,
    _wait_of,
)


class Waits(OracleCore):
    """The invariants of waits and callbacks."""

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
        window = self.window if wait.kind == TIMER else 0.0
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
                wait.kind == TIMER
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
            if wait.kind != TIMER:
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
            elif wait.kind == APPROVAL:
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
            if wait.kind != APPROVAL:
                self.violation(
                    order_id, f"a reject ended the {wait.kind} {name}: only an approval is rejected"
                )
                return
            self.count("approvals rejected")
            if before.process_state is ProcessState.ERROR:
                self.count("approvals rejected from Error")
        elif acts:
            self.violation(order_id, f"the {wait.kind} {name} was Failed by an operator's {sorted(acts)}")
        elif wait.kind != APPROVAL or wait.on_deadline != "compensate":
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

    def _deadline_error(self, truth: OrderTruth, index: int, wait: WaitTruth, now: float) -> None:
        """The Supervisor put a waiting order in Error: only an approval past its deadline, policy error."""
        name, until = truth.steps[index], truth.until.get(index)
        if wait.kind != APPROVAL or wait.on_deadline != "error":
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
            or after.waiting_for != CALLBACK
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
                after.process_state is ProcessState.WAITING and after.waiting_for == CALLBACK
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
