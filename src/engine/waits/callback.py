"""A service's callback: a step whose service took the call and answers later, at the callback route. No
step declares it: a service declared to answer later may, on any call, answer that it accepted it.

- It starts when the Agent's reply says accepted (ACCEPT): the step waits for its callback until the
  CompleteBy its dispatch was given; it sends nothing. An undo accepted so changes nothing: its callback
  is applied as its reply.
- It ends when the callback comes: its outcome is applied as an Agent's reply would be (STEP_SUCCEEDED,
  STEP_FAILED), fenced by the dispatch's step and attempt.
- Past its CompleteBy no callback came: the Supervisor counts it as a step's timeout (EXPIRE) and the step
  is called again with the same idempotency key, or, past the threshold, the order goes to Error.
- It does not park: its wait is a step's CompleteBy, short. An operator may retry the step now, as for a
  step running, and extend it, end it by hand (skip) or cancel the order, as any wait allows.

A step of a group that waits for its callback waits on its own while the task stays Processing: the
group's rows (``engine.machine``) say what happens to it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from ..rules import Operation, Rule, Slot, on_wait
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from .kind import Kind, MoveContext

CALLBACK: Final = "callback"  # the step's service took the call and answers later, at the callback route


class CallbackWait(Kind[None]):
    """A service's callback (see the module)."""

    name = CALLBACK
    text = "its service's callback"
    parks = False
    expires = Operation.EXPIRE
    rows = (
        # A service that answers later: the step waits for its callback until its CompleteBy; the callback's
        # outcome is applied as an Agent's reply would be. An undo accepted so: nothing to record.
        (
            Slot.ANSWERS,
            Rule(
                Operation.ACCEPT,
                ProcessState.PROCESSING,
                ((ProcessState.WAITING, "service accepted, waits for its callback"),),
                phase=Phase.FORWARD,
                step=StepStatus.RUNNING,
                grouped=False,
            ),
        ),
        (
            Slot.ANSWERS,
            Rule(
                Operation.ACCEPT,
                ProcessState.COMPENSATING,
                ((ProcessState.COMPENSATING, "undo accepted, waits for its callback"),),
                phase=Phase.COMPENSATE,
                step=StepStatus.COMPENSATING,
                changes=False,
            ),
        ),
        (
            Slot.ANSWERS,
            on_wait(
                Operation.STEP_SUCCEEDED,
                ProcessState.WAITING,
                (
                    (ProcessState.PROCESSING, "callback: step done, next step dispatched"),
                    (ProcessState.WAITING, "callback: step done, next step waits"),
                    (ProcessState.PROCESSED, "callback: last step done"),
                ),
                wait=CALLBACK,
            ),
        ),
        (
            Slot.ANSWERS,
            on_wait(
                Operation.STEP_FAILED,
                ProcessState.WAITING,
                (
                    (ProcessState.COMPENSATING, "callback: refused"),
                    (ProcessState.COMPENSATED, "callback: refused, nothing to undo"),
                ),
                wait=CALLBACK,
            ),
        ),
        # No callback by its CompleteBy: a step's timeout, counted.
        (
            Slot.EXPIRES,
            Rule(
                Operation.EXPIRE,
                ProcessState.WAITING,
                (
                    (
                        ProcessState.PENDING,
                        "no callback by CompleteBy, FailureCount < max (Supervisor, backoff)",
                    ),
                    (
                        ProcessState.ERROR,
                        "no callback by CompleteBy, FailureCount >= max (Supervisor, alert)",
                    ),
                ),
                wait=CALLBACK,
            ),
        ),
        # An operator need not wait for its CompleteBy: the step is called again now.
        (
            Slot.RETRIES,
            on_wait(
                Operation.RETRY_STEP,
                ProcessState.WAITING,
                ((ProcessState.PENDING, "operator retry step"),),
                wait=CALLBACK,
            ),
        ),
    )

    def until(self, record: TaskRecord, index: int, wait: None, ctx: MoveContext) -> datetime | None:
        """The CompleteBy the dispatch of step ``index`` was given (its Agent's call stopped there; the
        service's callback may come until then)."""
        return record.steps[index].complete_by


CALLBACK_WAIT: Final = CallbackWait()
