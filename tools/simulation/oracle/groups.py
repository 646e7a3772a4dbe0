"""Groups: steps side by side (the invariants' list: :mod:`simulation.oracle`). Each step of a group is held
to the invariants on its own (its attempts, its outcome, the Supervisor's count of its timeouts); no step
after a group starts before all of the group has completed (the join); an operator's action on a step of a
running group shows its effect on that step, the task staying at the group."""

from __future__ import annotations

from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState

from ..loop import at_seconds
from .core import ENGINE_ENTRIES, OperatorAct, OracleCore, OrderTruth, _group_of, _skipped

_DONE = (StepStatus.COMPLETED, StepStatus.LEFT_OUT)  # a step of a group the join counts as done


class Groups(OracleCore):
    """The invariants of groups."""

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
