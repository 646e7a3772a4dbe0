"""Task and step state records, with the pattern's own property names.

The pattern's worked example calls the task id ``OrderID``; the records keep that name (and
``LockedBy``, ``CompleteBy``, ``ProcessState``, ``FailureCount``) so anyone who read the pattern
recognises them in the state store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from . import metrics
from .calls import CallEntry


class ProcessState(StrEnum):
    """Task-level state (see the state machine in ``docs/architecture.md``)."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    # The current step waits for a time or a person (a timer, an approval); nothing runs meanwhile.
    WAITING = "Waiting"
    PROCESSED = "Processed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    ERROR = "Error"

    @property
    def terminal(self) -> bool:
        """Processed, Compensated and Error need nothing more from the Scheduler or Supervisor."""
        return self in (ProcessState.PROCESSED, ProcessState.COMPENSATED, ProcessState.ERROR)

    @property
    def in_flight(self) -> bool:
        """Work the Supervisor must watch."""
        return not self.terminal

    @property
    def finished(self) -> bool:
        """Done for good (Processed, Compensated): kept for the retention period, then purged. Error is
        terminal but not finished: it waits for an operator and is kept until one acts."""
        return self in (ProcessState.PROCESSED, ProcessState.COMPENSATED)


class StepStatus(StrEnum):
    """Step-level state. LeftOut: the step's condition did not hold when its turn came, so it was never
    called and is never undone."""

    NOT_STARTED = "NotStarted"
    RUNNING = "Running"
    # A wait (a timer or an approval) under way: no call, nothing to undo.
    WAITING = "Waiting"
    COMPLETED = "Completed"
    FAILED = "Failed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    # Its condition did not hold when its turn came: never called, never undone.
    LEFT_OUT = "LeftOut"


class Phase(StrEnum):
    """Whether the task is running its steps forward or undoing them."""

    FORWARD = "forward"
    COMPENSATE = "compensate"


class TaskState(BaseModel):
    """The task's state record."""

    model_config = ConfigDict(populate_by_name=True, validate_assignment=True)

    order_id: str = Field(alias="OrderID")
    locked_by: str | None = Field(default=None, alias="LockedBy")
    complete_by: datetime | None = Field(default=None, alias="CompleteBy")
    process_state: ProcessState = Field(default=ProcessState.PENDING, alias="ProcessState")
    failure_count: int = Field(default=0, ge=0, alias="FailureCount")
    workflow: str = Field(alias="Workflow")
    # The version of the workflow the task started on; it finishes (or is undone) on that definition.
    # Records written before versions existed ran version 1.
    workflow_version: int = Field(default=1, ge=1, alias="WorkflowVersion")
    phase: Phase = Field(default=Phase.FORWARD, alias="Phase")
    current_step: int = Field(default=0, ge=0, alias="CurrentStep")
    attempt: int = Field(default=0, ge=0, alias="Attempt", description="the current step's dispatch number")
    next_attempt_at: datetime | None = Field(default=None, alias="NextAttemptAt")
    # Set with CompleteBy when the Supervisor holds the task for a service whose breaker is open: while
    # the two are equal, the CompleteBy that passes is the hold's end, not a step that failed again.
    held_until: datetime | None = Field(default=None, alias="HeldUntil")
    last_error: str | None = Field(default=None, alias="LastError")
    # While the task is Waiting: what for ("timer", "approval") and until when (a timer's due time, an
    # approval's deadline). Kept on the state record so listings show them without reading the steps.
    waiting_for: str | None = Field(default=None, alias="WaitingFor")  # an engine.waits kind
    wait_until: datetime | None = Field(default=None, alias="WaitUntil")
    # Set with Error, cleared once the alert is known to be raised (or an operator took the task out of
    # Error): a process that dies between the two leaves it set, and the Supervisor raises the alert.
    alert_pending: bool = Field(default=False, alias="AlertPending")
    # The application that submitted the task, when it named itself (a storefront), and the queue its
    # status messages go to: the pattern's private response queue, named in the request and kept with
    # the state. None: the shared status queue (and tasks submitted before these were kept).
    submitter: str | None = Field(default=None, alias="Submitter")
    status_queue: str | None = Field(default=None, alias="StatusQueue")
    # The input fields its workflow declares searchable, as submitted (``engine.search``): the keys of the
    # order's search entries, kept so that they are purged with it.
    search: dict[str, str] | None = Field(default=None, alias="Search")
    # When the task came to its current step (or the current step's phase): "at charge-payment for 10 min".
    step_since: datetime | None = Field(default=None, alias="StepSince")
    # The span context of the order's submission (a W3C traceparent, see engine.tracing): the Supervisor's
    # recoveries and operators' actions join the order's trace under it. Absent when nothing traced it.
    trace_parent: str | None = Field(
        default=None, alias="TraceParent", max_length=55, exclude_if=lambda value: value is None
    )
    created_at: datetime = Field(alias="CreatedAt")
    updated_at: datetime = Field(alias="UpdatedAt")

    @property
    def hold_end(self) -> datetime | None:
        """When the Supervisor's hold ends, if the task is held now (else None)."""
        held = self.held_until is not None and self.held_until == self.complete_by
        return self.held_until if held and self.process_state.in_flight else None


class StepState(BaseModel):
    """One step's state record; ``result`` keeps what is needed to compensate the step."""

    model_config = ConfigDict(populate_by_name=True, validate_assignment=True)

    index: int = Field(alias="StepIndex", ge=0)
    name: str = Field(alias="StepName")
    status: StepStatus = Field(default=StepStatus.NOT_STARTED, alias="StepState")
    attempts: int = Field(default=0, ge=0, alias="Attempts")
    compensation_attempts: int = Field(default=0, ge=0, alias="CompensationAttempts")
    # Times the Supervisor found this step's current work past its CompleteBy, in its current phase: the
    # pattern's failure count per step, which decides Error (the task's FailureCount is the total).
    failures: int = Field(default=0, ge=0, alias="FailureCount")
    complete_by: datetime | None = Field(default=None, alias="CompleteBy")
    # Set when an operator skips the step while its Agent may still be calling the service: the call can
    # land until its CompleteBy plus the grace, so an undo of the step must not reach the service before.
    undo_not_before: datetime | None = Field(default=None, alias="UndoNotBefore")
    # A step of a group the Supervisor (or an operator) asked a Scheduler to dispatch again, from this time
    # on; its CompleteBy then watches that the ask is not lost. Cleared when it is dispatched or done.
    retry_at: datetime | None = Field(default=None, alias="RetryAt")
    last_error: str | None = Field(default=None, alias="LastError")
    # What the step's service returned when it applied the step (its declared result values), passed on to
    # later steps' conditions and bodies.
    result: dict[str, Any] | None = Field(default=None, alias="Result")
    # Why the step is in its state when no error says it (a step left out: the condition that failed).
    reason: str | None = Field(default=None, alias="Reason")
    # Its latest dispatches: what was sent, what came back, when, by whom (``engine.calls``).
    calls: list[CallEntry] = Field(default_factory=list, alias="Calls")


class AuditEntry(BaseModel):
    """One audited change to a task: an operator's action, or the engine putting the task in Error.

    Written in the same transaction as the change it describes, so neither exists without the other.
    """

    model_config = ConfigDict(populate_by_name=True)

    at: datetime = Field(alias="At")
    actor: str = Field(alias="Actor", max_length=512, description="who: a principal, a key's hash, or a role")
    action: str = Field(alias="Action", max_length=64)
    step: str | None = Field(default=None, alias="Step")
    process_state_before: ProcessState = Field(alias="ProcessStateBefore")
    process_state_after: ProcessState = Field(alias="ProcessStateAfter")
    step_state_before: StepStatus | None = Field(default=None, alias="StepStateBefore")
    step_state_after: StepStatus | None = Field(default=None, alias="StepStateAfter")
    note: str | None = Field(default=None, alias="Note", max_length=2000)
    detail: str | None = Field(default=None, alias="Detail", max_length=2000)


def _dumped(step: StepState) -> dict[str, Any]:
    """``step.model_dump()``, from the model's serializer directly: model_dump's handling of its keyword
    arguments is a quarter of the cost of dumping a step, and a record dumps every step of its own when it
    is built and at every save."""
    return StepState.__pydantic_serializer__.to_python(step)


@dataclass(slots=True)
class _SinceSaved:
    """What a :class:`TaskRecord` keeps of its last load or save: its steps then (``model_dump()``), its
    step and phase, its state; and what was attached since (audit entries, a changed input). Replaced, not
    changed (but for its list of audit entries), so a copy of a record never shares what the other
    changes."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    position: tuple[int, Phase] | None = None
    state: ProcessState | None = None
    audit: list[AuditEntry] = field(default_factory=list)
    input_changed: bool = False


class TaskRecord(BaseModel):
    """A task as loaded from the state store: its state, its steps, its input and their ETags.

    The record remembers its steps as they were last loaded or saved; :meth:`changed_steps` compares
    against that, so any change to a step (``record.steps[i].status = ...``) is saved with the state in
    one conditional transaction, with nothing to mark by hand.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    state: TaskState
    steps: list[StepState]
    input: dict[str, Any]
    input_hash: str
    etags: dict[str, str] = Field(default_factory=dict)
    indexed: bool = Field(default=False, description="an in-flight index entry exists in the store")
    # The store's key of the task's entry in its by-state listing, as saved (None: none yet, a task
    # written before the listing existed). Saved with the state, so the two never disagree.
    listed: str | None = None
    # Read from the history of finished tasks: read-only, never saved again.
    archived: bool = False
    # Read from where a task that waits long is parked (out of the live records until it is due): its
    # next save brings it back to the live records.
    parked: bool = False
    # Its audit entries are kept beside the history's or the parked copy (set by the store when read).
    audited: bool = False
    # Properties a later release stored on its records that this one does not know, by the record they
    # were on: written back unchanged with it, so a save never drops them (engine.formats).
    kept: dict[str, dict[str, Any]] = Field(default_factory=dict)
    _saved: _SinceSaved = PrivateAttr(default_factory=_SinceSaved)

    def _since_saved(self) -> _SinceSaved:
        """``self._saved``, read where pydantic keeps private attributes: a read of ``self._saved`` goes
        through ``BaseModel.__getattr__``, which raises and catches an AttributeError every time."""
        return self.__pydantic_private__["_saved"]  # type: ignore[index]

    def model_post_init(self, context: Any, /) -> None:
        """A record is built from what the store holds (or is about to write): that is its saved view."""
        self.mark_saved()

    def step(self, index: int) -> StepState:
        """A step (changes to it are saved like any change to ``steps[index]``)."""
        return self.steps[index]

    def changed_steps(self) -> list[int]:
        """The indexes of the steps that differ from what was last loaded or saved, in order."""
        return self.unsaved_steps()[0]

    def unsaved_steps(self) -> tuple[list[int], list[dict[str, Any]]]:
        """:meth:`changed_steps`, and every step as it is now (``model_dump()``): a store that writes the
        changed steps hands the latter to :meth:`mark_saved` once it wrote them, so that they are not
        dumped again."""
        saved = self._since_saved().steps
        steps = [_dumped(step) for step in self.steps]
        return [i for i, step in enumerate(steps) if i >= len(saved) or step != saved[i]], steps

    def mark_saved(self, steps: list[dict[str, Any]] | None = None) -> None:
        """The store wrote the record: its steps as they are now (or ``steps``, as :meth:`unsaved_steps`
        gave them for the write) are the saved view, and its audit entries are written."""
        if steps is None:
            steps = [_dumped(step) for step in self.steps]
        state, saved = self.state, self._since_saved()
        if saved.state is not None:
            # What this save made so is counted here, once, whoever saved it (Scheduler, Supervisor,
            # operator): a decision whose save lost its race counts nothing.
            metrics.observe_save(
                state.workflow, saved.state.value, state.process_state.value, saved.steps, steps
            )
        self._saved = _SinceSaved(steps, (state.current_step, state.phase), state.process_state)

    def change_input(self, values: dict[str, Any]) -> None:
        """Replace the input (its sensitive fields sealed or dropped, ``engine.sealing``): the next save
        writes it again, in the same transaction."""
        self.input = values
        self._saved = replace(self._since_saved(), input_changed=True)

    def input_changed(self) -> bool:
        """Whether the input differs from what was last loaded or saved."""
        return self._since_saved().input_changed

    def note_position(self, now: datetime) -> None:
        """Stamp ``StepSince`` when the task's step (or phase) differs from what was last saved."""
        state = self.state
        if state.step_since is None or (state.current_step, state.phase) != self._since_saved().position:
            state.step_since = now

    def audit(self, entry: AuditEntry) -> None:
        """Attach an audit entry: the store writes it with the next save, in the same transaction."""
        self._since_saved().audit.append(entry)

    def pending_audit(self) -> list[AuditEntry]:
        """Audit entries attached since the record was last loaded or saved."""
        return list(self._since_saved().audit)

    @property
    def version(self) -> str:
        """An opaque version of the whole record (state and steps), from the store's ETags: it changes
        with every save, so a client that read one version can ask to change only that version."""
        joined = "\n".join(f"{k}={v}" for k, v in sorted(self.etags.items()))
        return hashlib.sha256(joined.encode()).hexdigest()[:32]

    @property
    def order_id(self) -> str:
        """The task's id."""
        return self.state.order_id
