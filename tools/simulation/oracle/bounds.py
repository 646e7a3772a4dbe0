"""Every order terminal within its own bound (the invariants' list: :mod:`simulation.oracle`; the bounds are
:class:`simulation.liveness.Limits`): from when the faults stopped, or from its last action saved since, the
work left to it under the policy, checked while the run settles and at its end."""

from __future__ import annotations

from engine.state import Phase, StepStatus
from engine.waits import APPROVAL

from .core import OrderTruth
from .supervisor import Supervisor


class Bounds(Supervisor):
    """The orders' bounds."""

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
                if (wait := truth.waits[j]) is not None and wait.kind == APPROVAL
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
