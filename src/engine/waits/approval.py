"""An approval: a step that waits for a person to approve or reject it, by a deadline, and calls nothing
(declared with ``engine.workflow.Approval``).

- It starts when its turn comes, with its deadline ``deadline_seconds`` (or its setting) from then as its
  CompleteBy; it sends nothing.
- It ends when an approver or an operator decides: approved, the order goes on (APPROVE: the task goes back
  to a Scheduler, which alone dispatches); rejected, what the order did is undone (REJECT). Past its deadline
  it can no longer be approved while it waits (:meth:`ApprovalWait.refusal` says why).
- Past its CompleteBy its deadline has passed: the Supervisor applies its declared policy (DEADLINE: undo,
  or Error with an alert) and raises ``ApprovalOverdue``. An order it put in Error can still be approved or
  rejected there (or, as for any wait in Error, waited for again).
- It parks. An operator may extend it, end it by hand (skip) or cancel the order, as any wait allows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final, Literal

from .. import telemetry
from ..rules import Operation, Slot, on_wait
from ..state import ProcessState, StepState, TaskRecord
from ..workflow import Approval
from .kind import Kind, MoveContext

APPROVAL: Final = "approval"  # a person approves or rejects, by a deadline


class ApprovalWait(Kind[Approval]):
    """An approval (see the module)."""

    name = APPROVAL
    text = "an approval"
    parks = True
    expires = Operation.DEADLINE
    ends = (Operation.APPROVE, Operation.REJECT)
    overdue = telemetry.APPROVAL_OVERDUE
    rows = (
        # A person decides; the task goes back to a Scheduler (it alone dispatches), as after a skip or a
        # cancel.
        (
            Slot.ENDS,
            on_wait(
                Operation.APPROVE,
                ProcessState.WAITING,
                ((ProcessState.PENDING, "approved"),),
                wait=APPROVAL,
            ),
        ),
        (
            Slot.ENDS,
            on_wait(
                Operation.REJECT,
                ProcessState.WAITING,
                ((ProcessState.COMPENSATING, "rejected: undo"),),
                wait=APPROVAL,
            ),
        ),
        # Its deadline passed: its declared policy (undo, or Error with an alert).
        (
            Slot.EXPIRES,
            on_wait(
                Operation.DEADLINE,
                ProcessState.WAITING,
                (
                    (ProcessState.COMPENSATING, "approval deadline passed, policy compensate (Supervisor)"),
                    (ProcessState.ERROR, "approval deadline passed, policy error (Supervisor, alert)"),
                ),
                wait=APPROVAL,
            ),
        ),
        # Its deadline put the order in Error: it can still be decided there.
        (
            Slot.IN_ERROR,
            on_wait(
                Operation.APPROVE,
                ProcessState.ERROR,
                ((ProcessState.PENDING, "approved after the deadline (FailureCount reset)"),),
                wait=APPROVAL,
            ),
        ),
        (
            Slot.IN_ERROR,
            on_wait(
                Operation.REJECT,
                ProcessState.ERROR,
                ((ProcessState.COMPENSATING, "rejected after the deadline: undo"),),
                wait=APPROVAL,
            ),
        ),
    )

    def until(self, record: TaskRecord, index: int, wait: Approval, ctx: MoveContext) -> datetime | None:
        """Its deadline: ``deadline_seconds`` (or its setting) from now."""
        seconds = ctx.settings.wait_seconds.get(wait.setting or "", wait.deadline_seconds)
        return ctx.now + timedelta(seconds=seconds)

    def policy(self, wait: Approval) -> Literal["compensate", "error"]:
        """As declared (``on_deadline``)."""
        return wait.on_deadline

    def refusal(self, operation: Operation, step: StepState) -> str | None:
        """An approve refused although the table allows it: the deadline has passed."""
        if operation is not Operation.APPROVE:
            return None
        deadline = step.complete_by.isoformat() if step.complete_by else "?"
        return (
            f"the approval of step {step.name} is past its deadline ({deadline}): its workflow's "
            "policy applies (the Supervisor undoes the order, or puts it in Error to be decided there)"
        )


APPROVAL_WAIT: Final = ApprovalWait()
