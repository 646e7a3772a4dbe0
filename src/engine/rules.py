"""The state machine's words: every operation on a task (:class:`Operation`), one row of its table
(:class:`Rule`), and the places in the table where a kind of wait puts its own rows (:class:`Slot`).

The table itself is :mod:`engine.machine`'s: the rows every task shares, with each kind of wait's rows
(:mod:`engine.waits`) put in at its slots. This module is below both, so a kind can declare its rows and the
machine can collect them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from .state import Phase, ProcessState, StepStatus, TaskState


class Operation(StrEnum):
    """Everything that can happen to a task after it is submitted."""

    CLAIM = "claim"  # a Scheduler takes a free task and dispatches its current work
    STEP_SUCCEEDED = "step succeeded"
    STEP_FAILED = "step failed"  # a lasting fault: undo the task
    ACCEPT = "accept"  # the step's service took the call and answers later, at the callback route
    COMPENSATION_SUCCEEDED = "compensation succeeded"
    COMPENSATION_FAILED = "compensation failed"
    KICK = "kick"  # the Supervisor re-sends a lost kick
    EXPIRE = "expire"  # the Supervisor recovers a task past its CompleteBy
    HOLD = "hold"  # the Supervisor leaves an expired task alone while its service's breaker is open
    RELEASE = "release"  # the Supervisor gives back, uncharged, a held task (or one a trial call needs)
    RESUBMIT = "resubmit"  # an operator sends an Error task back
    CANCEL = "cancel"  # the application undoes a task that is not terminal
    RETRY_STEP = "retry step"  # an operator re-dispatches the current step now
    EXTEND_STEP = "extend step"  # an operator pushes a running step's CompleteBy
    SKIP_STEP = "skip step"  # an operator marks the current step done by hand; the task continues
    WORKFLOW_GONE = "workflow gone"  # the task's workflow version is no longer deployed
    WAKE = "wake"  # a timer's time has come: the Scheduler ends the wait
    REWAKE = "rewake"  # the Supervisor re-sends a timer's lost wake-up
    APPROVE = "approve"  # an approver or operator approves a waiting step
    REJECT = "reject"  # an approver or operator rejects a waiting step: undo the task
    DEADLINE = "deadline"  # the Supervisor applies a waiting approval's policy once its deadline passed
    REDISPATCH = "redispatch"  # a Scheduler dispatches one step of a group again (a retry asked for it)
    UPDATE_INPUT = "update input"  # the submitter or an operator changes input fields a workflow lets change


@dataclass(frozen=True)
class Rule:
    """One row: ``operation`` is allowed on a task in ``source`` that meets the guards, and leaves it in
    one of the ``targets`` states (which one depends on the task's steps and counters; each target says
    when).

    Guards: ``unlocked`` needs no Scheduler holding the task (``LockedBy`` empty); ``phase`` and
    ``step`` need the task's phase and its current step's status; ``wait`` needs the current step to be
    that kind of wait (``WaitingFor``: ``timer``, ``approval``, ``callback``; the rows that guard on a kind
    are its own, :mod:`engine.waits`); ``grouped`` needs the step to be (True) or not to be (False) one of a
    group that runs side by side, whose steps are each fenced, recovered and acted on by their own status.
    A rule with ``changes=False`` is allowed and does nothing (asking again for what is already under way).
    """

    operation: Operation
    source: ProcessState
    targets: tuple[tuple[ProcessState, str], ...]
    unlocked: bool = False
    phase: Phase | None = None
    step: StepStatus | None = None
    wait: str | None = None  # a kind's name (engine.waits)
    grouped: bool | None = None
    changes: bool = True

    def admits(self, state: TaskState, step: StepStatus | None, grouped: bool = False) -> bool:
        """Whether a task with this state record, whose step acted on has status ``step`` (and is one of a
        group when ``grouped``), meets the row."""
        return (
            state.process_state is self.source
            and (not self.unlocked or state.locked_by is None)
            and (self.phase is None or state.phase is self.phase)
            and (self.step is None or step is self.step)
            and (self.wait is None or state.waiting_for == self.wait)
            and (self.grouped is None or self.grouped is grouped)
        )

    @property
    def target_states(self) -> tuple[ProcessState, ...]:
        """The states the operation may leave the task in."""
        return tuple(target for target, _ in self.targets)


def on_wait(
    operation: Operation, source: ProcessState, targets: tuple[tuple[ProcessState, str], ...], *, wait: str
) -> Rule:
    """A row for the step a task waits at, in its forward phase, while it waits for ``wait`` (a kind's
    name): the guard most of a kind's own rows share."""
    return Rule(operation, source, targets, phase=Phase.FORWARD, step=StepStatus.WAITING, wait=wait)


class Slot(Enum):
    """Where in the table a kind of wait's rows go. The table is read in order: its first row that admits
    an operation is the one that applies, and the diagram lists the edges and their labels in the order it
    meets them, so a kind's rows go beside the rows they belong with (each slot's rows in the order of the
    kinds, :data:`engine.waits.KINDS`)."""

    ENDS = "ends"  # after a step's success: what ends a wait that calls nothing (its time, a person)
    ANSWERS = "answers"  # after a lasting agent error: a service that answers later, and its answer
    EXPIRES = "expires"  # after a task past its CompleteBy: a wait past its CompleteBy (the Supervisor)
    RETRIES = "retries"  # after an operator's retry of a step that runs: the retry of a wait
    IN_ERROR = "in error"  # after an operator's retry of a wait in Error: what else a wait allows there
