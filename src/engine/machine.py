"""The task state machine as one declared table: which operation may run in which state, and where it leads.

Every operation on a task (the Scheduler's claim and reply handling, the Supervisor's recovery, the
application's cancel, an operator's resubmit and step-level retry, extend and skip) asks this table
whether it is allowed before it changes anything. The rows every task shares are listed here; each kind of
wait declares its own (a timer's wake-up, an approval's decision, a service's callback: :mod:`engine.waits`),
and they are put in at the places the list leaves for them (:class:`~engine.rules.Slot`).
The state diagram in ``docs/architecture.md`` is generated from the same table (``python -m engine.machine``),
and a test checks that the two agree.
"""

from __future__ import annotations

from . import waits
from .rules import Operation, Rule, Slot
from .state import Phase, ProcessState, StepStatus, TaskState

INITIAL = ProcessState.PENDING


P, R, W, D = ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.WAITING, ProcessState.PROCESSED
C, CD, E = ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.ERROR
Op = Operation
FORWARD, BACK = Phase.FORWARD, Phase.COMPENSATE
RUNNING, UNDOING = StepStatus.RUNNING, StepStatus.COMPENSATING
NOT_STARTED, WAITING = StepStatus.NOT_STARTED, StepStatus.WAITING

_LISTED: tuple[Rule | Slot, ...] = (
    # Steps side by side (a group): the task is Processing while any of them is in flight; each step's
    # reply, callback and recovery touch that step alone, and the task moves on when all are done.
    Rule(
        Op.STEP_SUCCEEDED,
        R,
        (
            (R, "group: a step done, others run on"),
            (W, "group done, next step waits"),
            (D, "group done, last step"),
        ),
        phase=FORWARD,
        step=RUNNING,
        grouped=True,
    ),
    Rule(
        Op.ACCEPT,
        R,
        ((R, "group: a step waits for its callback"),),
        phase=FORWARD,
        step=RUNNING,
        grouped=True,
    ),
    Rule(
        Op.STEP_SUCCEEDED,
        R,
        (
            (R, "group: a callback done"),
            (W, "group done, next step waits"),
            (D, "group done, last step"),
        ),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    Rule(
        Op.STEP_FAILED,
        R,
        ((C, "group: a step failed, the others settle, then undo"),),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    Rule(
        Op.REDISPATCH,
        R,
        ((R, "group: a step dispatched again"),),
        phase=FORWARD,
        step=RUNNING,
        grouped=True,
    ),
    Rule(
        Op.REDISPATCH,
        R,
        ((R, "group: a step dispatched again"),),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    # The Supervisor recovers each step of a group past its CompleteBy on its own: the step is dispatched
    # again after its backoff (or its breaker's hold), or, past the threshold, the task goes to Error.
    Rule(
        Op.EXPIRE,
        R,
        (
            (R, "group: a step past CompleteBy (Supervisor, backoff or hold)"),
            (E, "group: a step failed too often (Supervisor, alert)"),
        ),
        phase=FORWARD,
        grouped=True,
    ),
    # An operator's retry, skip or extension of one step of a group in flight touches that step alone.
    Rule(
        Op.RETRY_STEP,
        R,
        ((R, "group: operator retry, skip or extend a step"),),
        phase=FORWARD,
        step=RUNNING,
        grouped=True,
    ),
    Rule(
        Op.RETRY_STEP,
        R,
        ((R, "group: operator retry, skip or extend a step"),),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    Rule(
        Op.SKIP_STEP,
        R,
        ((R, "group: operator retry, skip or extend a step"), (P, "operator skip step, group done")),
        phase=FORWARD,
        step=RUNNING,
        grouped=True,
    ),
    Rule(
        Op.SKIP_STEP,
        R,
        ((R, "group: operator retry, skip or extend a step"), (P, "operator skip step, group done")),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    Rule(
        Op.EXTEND_STEP,
        R,
        ((R, "group: operator retry, skip or extend a step"),),
        phase=FORWARD,
        step=WAITING,
        grouped=True,
    ),
    # A group failed or was cancelled while a step of it ran: that step's result, if it comes before its
    # undo is dispatched, is kept (its undo reads it); nothing else changes.
    Rule(
        Op.STEP_SUCCEEDED,
        C,
        ((C, "group failed: a step done, kept for its undo"),),
        phase=BACK,
        step=RUNNING,
        grouped=True,
    ),
    # The Scheduler claims a free task (ETag-conditional) and dispatches its current step, forward or
    # back; a task with nothing left to do finishes on the spot.
    Rule(
        Op.CLAIM,
        P,
        (
            (R, "Scheduler claims (ETag), dispatches a step"),
            (W, "Scheduler claims, a step waits"),
            (C, "Scheduler claims (ETag), resumes undoing"),
            (D, "Scheduler claims, no step left"),
            (CD, "Scheduler claims, nothing left to undo"),
        ),
        unlocked=True,
    ),
    Rule(
        Op.CLAIM,
        C,
        ((C, "Scheduler claims (ETag), dispatches an undo"), (CD, "Scheduler claims, nothing left to undo")),
        unlocked=True,
    ),
    # Agents' replies, fenced: only for the step that is running in the task's current phase.
    Rule(
        Op.STEP_SUCCEEDED,
        R,
        ((R, "step done, next step dispatched"), (W, "step done, next step waits"), (D, "last step done")),
        phase=FORWARD,
        step=RUNNING,
        grouped=False,
    ),
    # What ends a wait that calls nothing: its time, a person (each kind's own rows, engine.waits).
    Slot.ENDS,
    Rule(
        Op.STEP_FAILED,
        R,
        ((C, "lasting agent error"), (CD, "lasting agent error, nothing to undo")),
        phase=FORWARD,
        step=RUNNING,
    ),
    # A service that answers later: the step waits for its callback, whose outcome is applied as an Agent's
    # reply would be (engine.waits.callback).
    Slot.ANSWERS,
    Rule(
        Op.COMPENSATION_SUCCEEDED,
        C,
        ((C, "step undone, next undo dispatched"), (CD, "every step undone")),
        phase=BACK,
        step=UNDOING,
    ),
    Rule(Op.COMPENSATION_FAILED, C, ((E, "compensation failed (alert)"),), phase=BACK, step=UNDOING),
    # The Supervisor, for a task past its CompleteBy. It knows no business logic: it counts failures.
    Rule(Op.KICK, P, ((P, "kick lost (Supervisor re-kicks)"),), unlocked=True),
    # An undo given back (or cancelled) waits unlocked for a Scheduler, as a Pending task does: its lost
    # command is no failure of the step, whose undo was not even dispatched.
    Rule(Op.KICK, C, ((C, "resume lost (Supervisor re-kicks)"),), unlocked=True),
    Rule(
        Op.EXPIRE,
        R,
        (
            (P, "CompleteBy passed, FailureCount < max (Supervisor, backoff)"),
            (E, "CompleteBy passed, FailureCount >= max (Supervisor, alert)"),
        ),
        grouped=False,
    ),
    Rule(
        Op.EXPIRE,
        C,
        (
            (C, "CompleteBy passed, FailureCount < max (Supervisor, backoff)"),
            (E, "CompleteBy passed, FailureCount >= max (Supervisor, alert)"),
        ),
    ),
    # A wait past its CompleteBy, as its kind says (engine.waits): a timer's wake-up sent again, an
    # approval's deadline policy, a callback counted as a step's timeout.
    Slot.EXPIRES,
    # The Supervisor, for a task past its CompleteBy whose step's service has an open circuit breaker: the
    # step did not fail, its service is down, so no failure is counted. It looks again when the breaker's
    # open interval ends; then (or when a trial call is due) it gives the task back, still uncharged.
    Rule(Op.HOLD, R, ((R, "CompleteBy passed, breaker open (Supervisor holds)"),)),
    Rule(Op.HOLD, C, ((C, "CompleteBy passed, breaker open (Supervisor holds)"),)),
    Rule(Op.RELEASE, R, ((P, "breaker hold over (Supervisor, no failure)"),)),
    Rule(Op.RELEASE, C, ((C, "breaker hold over (Supervisor, no failure)"),)),
    # The operator and the application.
    Rule(Op.RESUBMIT, E, ((P, "operator resubmit (FailureCount reset)"),)),
    Rule(Op.CANCEL, P, ((C, "cancel"), (CD, "cancel, nothing started"))),
    Rule(Op.CANCEL, R, ((C, "cancel"),)),
    Rule(Op.CANCEL, W, ((C, "cancel"),)),
    Rule(Op.CANCEL, C, ((C, "cancel while undoing: nothing to do"),), changes=False),
    # Step-level operator actions, on the task's current step only. A retry or a skip hands the task back
    # unlocked with a kick, so a Scheduler claims it and dispatches as usual; an attempt still in flight
    # is fenced out by its attempt number. A lasting agent error starts compensation at once, so the
    # failures an operator retries are a forward step that ran out of attempts (Error) and an undo that
    # failed or is still running.
    Rule(Op.RETRY_STEP, P, ((P, "operator retry step"),), phase=FORWARD, step=RUNNING),
    Rule(Op.RETRY_STEP, R, ((P, "operator retry step"),), phase=FORWARD, step=RUNNING, grouped=False),
    Slot.RETRIES,  # a wait retried now (a callback: its step called again)
    Rule(Op.RETRY_STEP, C, ((C, "operator retry undo"),), phase=BACK, step=UNDOING),
    Rule(
        Op.RETRY_STEP,
        E,
        ((P, "operator retry step (FailureCount reset)"),),
        phase=FORWARD,
        step=RUNNING,
    ),
    # A wait that put the order in Error (an approval past its deadline): wait again, or (as its kind
    # allows) decide now.
    Rule(Op.RETRY_STEP, E, ((P, "operator waits again (FailureCount reset)"),), phase=FORWARD, step=WAITING),
    Slot.IN_ERROR,
    Rule(
        Op.RETRY_STEP,
        E,
        ((C, "operator retry undo (FailureCount reset)"),),
        phase=BACK,
        step=UNDOING,
    ),
    Rule(Op.EXTEND_STEP, R, ((R, "operator extend step"),), phase=FORWARD, step=RUNNING),
    Rule(Op.EXTEND_STEP, W, ((W, "operator extend wait"),), phase=FORWARD, step=WAITING),
    Rule(Op.EXTEND_STEP, C, ((C, "operator extend undo"),), phase=BACK, step=UNDOING),
    Rule(Op.SKIP_STEP, P, ((P, "operator skip step"),), phase=FORWARD, step=RUNNING),
    Rule(Op.SKIP_STEP, P, ((P, "operator skip step"),), phase=FORWARD, step=NOT_STARTED),
    Rule(Op.SKIP_STEP, R, ((P, "operator skip step"),), phase=FORWARD, step=RUNNING, grouped=False),
    Rule(Op.SKIP_STEP, W, ((P, "operator ends the wait"),), phase=FORWARD, step=WAITING),
    Rule(
        Op.SKIP_STEP,
        E,
        ((P, "operator skip step (FailureCount reset)"),),
        phase=FORWARD,
        step=RUNNING,
    ),
    # An update of the input, going forward (the declared fence, a step not yet started, is the move's).
    Rule(Op.UPDATE_INPUT, P, ((P, "input updated"),), phase=FORWARD),
    Rule(Op.UPDATE_INPUT, R, ((R, "input updated"),), phase=FORWARD),
    Rule(Op.UPDATE_INPUT, W, ((W, "input updated"),), phase=FORWARD),
    Rule(Op.UPDATE_INPUT, E, ((E, "input updated"),), phase=FORWARD),
    # A task on a workflow version no longer deployed is never run on another definition.
    Rule(Op.WORKFLOW_GONE, P, ((E, "workflow version not deployed (alert)"),)),
    Rule(Op.WORKFLOW_GONE, R, ((E, "workflow version not deployed (alert)"),)),
    Rule(Op.WORKFLOW_GONE, W, ((E, "workflow version not deployed (alert)"),)),
    Rule(Op.WORKFLOW_GONE, C, ((E, "workflow version not deployed (alert)"),)),
)
del P, R, W, D, C, CD, E, Op, FORWARD, BACK, RUNNING, UNDOING, NOT_STARTED, WAITING

# The table: the rows above, each slot filled with the kinds' rows for it (engine.waits).
TABLE: tuple[Rule, ...] = tuple(
    row for listed in _LISTED for row in (waits.rows(listed) if isinstance(listed, Slot) else (listed,))
)


def rule(
    operation: Operation, state: TaskState, step: StepStatus | None = None, grouped: bool = False
) -> Rule | None:
    """The row that allows ``operation`` on a task in this state, or None if the table forbids it (the
    first row that admits it: a group's rows come first)."""
    return next((r for r in TABLE if r.operation is operation and r.admits(state, step, grouped)), None)


def sources(operation: Operation) -> tuple[ProcessState, ...]:
    """The states in which ``operation`` can be allowed at all (for error messages)."""
    return tuple(dict.fromkeys(r.source for r in TABLE if r.operation is operation))


def edges() -> list[tuple[ProcessState, ProcessState, str]]:
    """Every (from, to, label) the table allows, one per pair of states (labels joined), in table order."""
    labels: dict[tuple[ProcessState, ProcessState], list[str]] = {}
    for row in TABLE:
        if row.changes:
            for target, label in row.targets:
                texts = labels.setdefault((row.source, target), [])
                if label not in texts:
                    texts.append(label)
    return [(a, b, " / ".join(texts)) for (a, b), texts in labels.items()]


def diagram() -> str:
    """The state diagram (Mermaid) of :data:`TABLE`, as ``docs/architecture.md`` shows it."""
    lines = ["stateDiagram-v2", f"    [*] --> {INITIAL.value}: submit"]
    lines += [f"    {a.value} --> {b.value}: {label}" for a, b, label in edges()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(diagram())
