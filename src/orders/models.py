"""The order as the HTTP API accepts and returns it."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from engine import (
    AuditEntry,
    CallEntry,
    OperatorAction,
    ProcessState,
    StepStatus,
    TaskRecord,
    TaskState,
    WaitKind,
    WorkflowDefinition,
    open_updates,
    queues,
    sealing,
    tracing,
)

from .catalog import CATALOG
from .inputs import WholeNumber

OrderId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,64}$")]


class OrderRequest(BaseModel):
    """The envelope of ``POST /api/orders``: which order, and which declared workflow runs it (none: the
    first one declared). Every other field is the workflow's input, validated with its input model
    (:func:`order_input`)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    order_id: OrderId | None = Field(default=None, alias="orderId")
    workflow: Annotated[str, Field(json_schema_extra={"enum": CATALOG.names})] | None = None

    def input_fields(self) -> dict[str, Any]:
        """The fields of the body that are the workflow's input."""
        return dict(self.model_extra or {})


def order_input(workflow: WorkflowDefinition, fields: dict[str, Any]) -> dict[str, Any]:
    """The order's input as stored: validated with the workflow's input model and dumped by it (camelCase,
    defaults filled in), so conditions and bodies read one shape. Raises ValidationError."""
    if workflow.input is None:
        return fields
    return workflow.input.model_validate(fields).model_dump(by_alias=True, mode="json")


def order_document(order_id: str, order_input: dict[str, Any]) -> dict[str, Any]:
    """The order as stored and handed to the agents (the workflow is recorded with the task)."""
    return {"orderId": order_id, **order_input}


def body_hash(document: dict[str, Any], workflow: str | None = None) -> str:
    """Identifies a body: the same order resubmitted with the same body hashes the same. A workflow other
    than the default is part of it, so the same order id with another workflow is a conflict."""
    identity = document if workflow is None else {**document, "workflow": workflow}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class _View(BaseModel):
    """A response body: camelCase on the wire, every field present (null when unknown)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON body."""
        return self.model_dump(mode="json", by_alias=True)


class StepView(_View):
    """One step of an order."""

    name: str
    state: StepStatus
    attempts: int
    compensation_attempts: int = Field(alias="compensationAttempts")
    complete_by: datetime | None = Field(alias="completeBy")
    last_error: str | None = Field(alias="lastError")
    reason: str | None = Field(description="why the step is in its state: a step left out, one skipped")
    result: dict[str, Any] | None = Field(description="the values its service returned, passed on")
    group: str | None = Field(description="the group of steps it runs side by side with (those next to it)")
    retry_at: datetime | None = Field(
        alias="retryAt", description="a step of a group asked to run again from this time on"
    )
    calls: list[CallEntry] = Field(
        description="its latest dispatches, oldest first: what was sent (sensitive fields redacted), what "
        "came back, when, by which process, and what the Supervisor did when one ran out of time"
    )


class OrderSummary(_View):
    """An order's task state."""

    order_id: str = Field(
        alias="orderId",
        description="a storefront sees the id it gave; others see <storefront>.<id> for a storefront's order",
    )
    storefront: str | None = Field(default=None, description="the storefront that submitted it, if any")
    workflow: str
    workflow_version: int = Field(alias="workflowVersion")
    process_state: ProcessState = Field(alias="processState")
    failure_count: int = Field(alias="failureCount")
    locked_by: str | None = Field(alias="lockedBy")
    complete_by: datetime | None = Field(alias="completeBy")
    # Set while the Supervisor holds the order because its current step's service has an open breaker.
    held_until: datetime | None = Field(alias="heldUntil")
    waiting_for: WaitKind | None = Field(
        default=None, alias="waitingFor", description="while Waiting: what the order waits for"
    )
    wait_until: datetime | None = Field(
        default=None, alias="waitUntil", description="while Waiting: a timer's time, an approval's deadline"
    )
    created_at: datetime = Field(alias="createdAt")
    updated_at: datetime = Field(alias="updatedAt")
    last_error: str | None = Field(alias="lastError")
    current_step: str | None = Field(
        default=None, alias="currentStep", description="the step it is at (a group's: its first step)"
    )
    at_step_since: datetime | None = Field(
        default=None, alias="atStepSince", description="since when it has been at that step (and phase)"
    )


class Updatable(_View):
    """Input fields an update may still change, and the step that fences them."""

    fields: list[str]
    until: str = Field(description="the step that reads them: once it starts, they no longer change")


class OrderStatus(OrderSummary):
    """An order's task state, every step and its input (``GET /api/orders/{orderId}``)."""

    trace_id: str | None = Field(
        default=None,
        alias="traceId",
        description="the order's trace id (W3C): Application Insights' operation_Id; orders-trace locally",
    )
    steps: list[StepView]
    input: dict[str, Any] = Field(
        description="the order as stored and handed to its steps, with every update applied; a sensitive "
        "field (writeOnly in its workflow's input schema) shows [redacted], and is absent once no step "
        "needs it"
    )
    updatable: list[Updatable] = Field(
        default_factory=list,
        description="the input fields POST .../update may still change, each until a step starts (none "
        "once that step has started, or the order is being undone or has ended)",
    )


class OrderAccepted(_View):
    """The answer to a submission."""

    order_id: str = Field(alias="orderId")
    process_state: ProcessState = Field(alias="processState")
    status_url: str = Field(
        alias="statusUrl",
        description="where to read the order: the app's PUBLIC_BASE_URL followed by /api/orders/{orderId}, "
        "or that path alone where it sets none; never built from the request's Host",
    )


class OrderPage(_View):
    """One page of orders in one state."""

    items: list[OrderSummary]
    continuation_token: str | None = Field(alias="continuationToken")
    backfilling: list[str] = Field(
        default_factory=list,
        description="the backfills this answer depends on that have not finished (docs/upgrading.md): until "
        "they have, it may miss orders stored before the release that added them; empty when complete",
    )


class StateCount(_View):
    """How many orders one ProcessState holds."""

    process_state: ProcessState = Field(alias="processState")
    count: int


class WaitCount(_View):
    """How many Waiting orders wait for one kind of wait."""

    waiting_for: WaitKind = Field(alias="waitingFor")
    count: int


class OrderCounts(_View):
    """How many orders each ProcessState holds (``GET /api/order-counts``)."""

    items: list[StateCount]
    waiting: list[WaitCount] = Field(description="the Waiting orders by what they wait for")
    at_least: bool = Field(
        alias="atLeast", description="true when counting stopped at its limit: every count is a lower bound"
    )
    backfilling: list[str] = Field(
        default_factory=list,
        description="the backfills this answer depends on that have not finished (docs/upgrading.md): until "
        "they have, it may miss orders stored before the release that added them; empty when complete",
    )


class AuditView(_View):
    """One audited change: who did what, when, and the states before and after."""

    at: datetime
    actor: str
    action: str
    step: str | None
    process_state_before: ProcessState = Field(alias="processStateBefore")
    process_state_after: ProcessState = Field(alias="processStateAfter")
    step_state_before: StepStatus | None = Field(alias="stepStateBefore")
    step_state_after: StepStatus | None = Field(alias="stepStateAfter")
    note: str | None
    detail: str | None


class AuditPage(_View):
    """An order's audit trail, oldest first."""

    items: list[AuditView]


class FieldError(_View):
    """One invalid field of a request."""

    field: str
    message: str


class ErrorInfo(BaseModel):
    """What went wrong: a stable code, a message for people, and per-field details when there are any."""

    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    details: list[FieldError] | None = None


class ErrorBody(BaseModel):
    """Every error answer."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorInfo


class Health(_View):
    """Liveness, and the release answering (:mod:`orders.release`)."""

    status: str
    version: str = Field(description="the release running, semantic versioning (CHANGELOG.md)")


Note = Annotated[str, StringConstraints(min_length=1, max_length=1000)]


class ActionRequest(BaseModel):
    """The optional body of resubmit, cancel and retry: a note for the audit trail."""

    model_config = ConfigDict(extra="forbid")

    note: Note | None = None


class ExtendRequest(ActionRequest):
    """The body of ``.../extend``: how many seconds to push the step's CompleteBy by."""

    seconds: WholeNumber = Field(ge=1, le=86_400)


class UpdateRequest(ActionRequest):
    """The body of ``.../update``: the input fields to change and their new values (the workflow's input
    model validates the order's input with them)."""

    input: dict[str, JsonValue] = Field(min_length=1, max_length=50)


class SkipRequest(ActionRequest):
    """The body of ``.../skip``: why the step is done by hand (required)."""

    note: Note


def action_body(action: OperatorAction) -> tuple[type[ActionRequest], bool]:
    """The body an operator action's route takes, and whether it is required."""
    if action.takes_input:
        return UpdateRequest, True
    if action.takes_seconds:
        return ExtendRequest, True
    if action.note_required:
        return SkipRequest, True
    return ActionRequest, False


def summary(state: TaskState, storefront: str | None = None) -> OrderSummary:
    """The order's task state as the API shows it (to ``storefront``: under the id that storefront gave)."""
    return OrderSummary(
        order_id=queues.unscoped_id(state.order_id, storefront),
        storefront=state.submitter,
        workflow=state.workflow,
        workflow_version=state.workflow_version,
        process_state=state.process_state,
        failure_count=state.failure_count,
        locked_by=state.locked_by if storefront is None else None,  # a process: nothing of a storefront's
        complete_by=state.complete_by,
        held_until=state.hold_end,
        waiting_for=state.waiting_for,  # type: ignore[arg-type]  # set only by the engine, to a Wait's kind
        wait_until=state.wait_until,
        created_at=state.created_at,
        updated_at=state.updated_at,
        last_error=state.last_error,
        current_step=_step_name(state),
        at_step_since=state.step_since,
    )


def _step_name(state: TaskState) -> str | None:
    """The name of the step the task is at, from its workflow version as deployed (None if not)."""
    workflow = CATALOG.find(state.workflow, state.workflow_version)
    if workflow is None or state.current_step >= len(workflow.steps):
        return None
    return workflow.steps[state.current_step].name


def status_view(
    record: TaskRecord, storefront: str | None = None, workflow: WorkflowDefinition | None = None
) -> OrderStatus:
    """``GET /api/orders/{orderId}``: the task state and every step (with its group, from the order's
    workflow version: ``workflow``, or the deployed catalog's)."""
    workflow = workflow or CATALOG.find(record.state.workflow, record.state.workflow_version)
    declared = workflow.steps if workflow is not None and len(workflow.steps) == len(record.steps) else None
    steps = [
        StepView(
            name=s.name,
            state=s.status,
            attempts=s.attempts,
            compensation_attempts=s.compensation_attempts,
            complete_by=s.complete_by,
            last_error=s.last_error,
            reason=s.reason,
            result=s.result,
            group=declared[i].group if declared is not None else None,
            retry_at=s.retry_at,
            # What the app sent its services, under the order's full name, and by which process: the app's
            # business, not the storefront's (docs/operating.md, Storefronts).
            calls=s.calls if storefront is None else [],
        )
        for i, s in enumerate(record.steps)
    ]
    return OrderStatus(
        **summary(record.state, storefront).model_dump(),
        trace_id=tracing.trace_id(record.state.trace_parent),
        steps=steps,
        # Sensitive fields never leave the store in a read: "[redacted]" (absent once no step needs them).
        input=sealing.redacted_input(record.input, workflow.sensitive if workflow is not None else ()),
        updatable=[
            Updatable(fields=list(u.fields), until=u.until)
            for u in (open_updates(record, workflow) if workflow is not None else ())
        ],
    )


def audit_view(entry: AuditEntry) -> AuditView:
    """One audit entry as the API shows it."""
    return AuditView(**entry.model_dump())
