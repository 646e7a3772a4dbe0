"""The Supervisor, held to its policy and its schedule (the invariants' list: :mod:`simulation.oracle`): Error
is entered only as the policy says (by the Scheduler for a failed undo, by the Supervisor once a step has had
``SUPERVISOR_MAX_FAILURES`` counted timeouts, an approval's deadline under policy error), and never later
than that; once the faults stopped, a sweep ends normally and recovers every task past its CompleteBy."""

from __future__ import annotations

import heapq

from engine.messages import ReplyOutcome
from engine.state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskState
from engine.waits import CALLBACK

from ..loop import at_seconds
from .core import ENGINE_ENTRIES, OrderTruth, _group_of, _wait_of
from .groups import Groups
from .waits import Waits


class Supervisor(Waits, Groups):
    """The invariants of the Supervisor's policy and schedule."""

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
        callback = before.process_state is ProcessState.WAITING and before.waiting_for == CALLBACK
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
