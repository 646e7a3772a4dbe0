"""Operator actions (the invariants' list: :mod:`simulation.oracle`): every action answered as done had its
effect, as ``engine.tasks`` promises it: the save that carries its audit entry shows it, its command was
sent; and once the run has settled (:func:`settled_liveness`) what it had to lead to happened, unless a later
action on the order took over (with the orders past their bound the run did not report yet)."""

from __future__ import annotations

import json

from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState
from engine.waits import CALLBACK, TIMER

from ..loop import at_seconds
from .bounds import Bounds
from .core import (
    ENGINE_ENTRIES,
    OPERATOR_NOTE,
    OperatorAct,
    OracleCore,
    OrderTruth,
    _group_of,
    _skipped,
    _undoable,
    _wait_of,
)


class Operators(Bounds):
    """The invariants of operator actions."""

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
        for entry in actions:
            if entry.action == "update" and entry.detail:
                # What the order's steps read from now on: each field's value after, as audited.
                truth.input.update(
                    {name: change["after"] for name, change in json.loads(entry.detail).items()}
                )
        if any(entry.action != "update" for entry in actions):
            # An update moves nothing: what an earlier action leads to still follows it.
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
        if act.what == "update":  # the input changed (applied above), nothing else
            if (
                became is not was
                or after.current_step != before.current_step
                or after.attempt != before.attempt
            ):
                return f"the task went {was.value} -> {became.value}, step {after.current_step}"
            self.count("updates saved")
            return None
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
                window = self.window if wait.kind == TIMER else 0.0
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
                if after.wait_until != new or after.waiting_for != CALLBACK:
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
            # Only a cancel is done without a change: of an order already being undone; and an update to the
            # values the order already holds.
            if act.what == "update":
                return
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
        elif (act.beside and act.what != "retry") or act.what == "update":
            return  # a skip of a step of a group whose others run on, an update: nothing to send
        elif act.after is not ProcessState.COMPENSATED and truth.commands_at < act.saved_at:
            self.violation(order_id, f"the {act.name} was answered as done, but no command was sent")


def _token(note: str | None) -> int | None:
    """The token of an action the simulation's operator sent (its note says ``simulated #<token>``)."""
    if note is None or not note.startswith(OPERATOR_NOTE):
        return None
    return int(note.removeprefix(OPERATOR_NOTE))


def settled_liveness(oracle: Bounds) -> None:
    """Every end-of-run liveness invariant, from the oracle's records: the orders past their bound that
    the run did not report yet, and what each operator action answered as done had to lead to."""
    now = oracle.now()
    for truth in oracle.orders.values():
        due = oracle.terminal_by(truth)
        state = truth.state
        if due is not None and now > due and not truth.late and state is not None and not state.terminal:
            oracle.violation(truth.order_id, f"still {state.value} at the end, after its bound {due:.1f}")
        for act in truth.acts:
            if act.answered:
                _followed(oracle, truth, act)


def _followed(oracle: OracleCore, truth: OrderTruth, act: OperatorAct) -> None:
    """What an action answered as done leads to, unless a later action on the order took over: a cancel
    ends Compensated (or in Error, which its answer could not know of: counted, not a violation); a retry
    dispatches the step again (or the old attempt's undo lands first), a wait's retry starts it again; a
    resubmit, a skip or an approve puts the order back in a Scheduler's hands; a reject, as a cancel, never
    ends Processed."""
    state = truth.state
    if state is None:
        return
    if act.what == "reject" and act.saved_at is not None and state is ProcessState.PROCESSED:
        oracle.violation(
            truth.order_id, f"the {act.name} answered as done at {act.asked_at:.3f} ended Processed"
        )
        return
    if act.what == "cancel":
        if state is ProcessState.ERROR:
            oracle.count("cancel answered as done, then Error")
        elif state is ProcessState.PROCESSED:
            oracle.violation(
                truth.order_id, f"the cancel answered as done at {act.asked_at:.3f} ended Processed"
            )
        return
    if act.saved_at is None or truth.acted_at > act.saved_at:
        return  # nothing saved (a violation of its own), or a later action took over
    if act.what == "retry":
        view = truth.views[act.index]
        attempts = view.attempts if act.phase is Phase.FORWARD else view.compensation_attempts
        running = StepStatus.RUNNING if act.phase is Phase.FORWARD else StepStatus.COMPENSATING
        if act.wait:
            running = StepStatus.WAITING
        if attempts <= act.attempts and view.status is running:
            oracle.violation(
                truth.order_id,
                f"the {act.name} answered as done at {act.asked_at:.3f} never dispatched it again "
                f"(attempt {attempts}, {state.value})",
            )
    elif act.beside and act.what == "skip":
        return  # the others of its group ran on: the task was never handed back
    elif act.what in ("resubmit", "skip", "approve") and truth.left_pending_at < act.saved_at:
        oracle.violation(
            truth.order_id,
            f"the {act.name} answered as done at {act.asked_at:.3f} never got the order claimed "
            f"({state.value})",
        )
