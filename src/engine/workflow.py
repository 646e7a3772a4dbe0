"""Workflow definitions as data: ordered steps, each naming its agent, budget, retries and compensation.

A :class:`WorkflowCatalog` holds every definition a deployment serves: each workflow by name, in every
version that orders in flight may still be on. New orders take a workflow's latest version; an order
keeps the version it started on until it ends.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .conditions import Condition, Declared, check_input_path, parts, refuse_unknown


class RetryPolicy(Declared):
    """How an Agent retries transient faults within one attempt of a step."""

    max_tries: int = Field(default=6, ge=1, description="calls to the remote service per attempt, at most")
    initial_backoff_seconds: float = Field(default=0.2, gt=0)
    max_backoff_seconds: float = Field(default=5.0, gt=0)
    call_timeout_seconds: float = Field(default=10.0, gt=0, description="per call; capped by complete-by")
    min_call_seconds: float = Field(
        default=0.0,
        ge=0,
        description="a retry is made only if at least this long (and the service's typical latency) is left",
    )
    breaker_fail_max: int = Field(default=5, ge=1, description="consecutive failures that open the breaker")
    breaker_reset_seconds: float = Field(default=10.0, gt=0, description="how long the breaker stays open")


class StepDefinition(Declared):
    """One step: the agent that runs it, its action, the action that undoes it, and when it runs."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    agent: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,40}$", description="the agent (and its queue) that runs it"
    )
    action: str
    compensation: str | None = Field(
        default=None,
        description="the action that undoes it; None for a step that cannot be undone: a later failure or "
        "a cancel undoes the steps before it and never it",
    )
    complete_by_seconds: float | None = Field(
        default=None, gt=0, description="the step's budget; None uses the STEP_COMPLETE_BY_SECONDS setting"
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    when: Condition | None = Field(
        default=None,
        description="run only when this holds on the order's input and earlier results; else left out",
    )


class WorkflowDefinition(BaseModel):
    """An ordered list of steps, run forward and compensated in reverse; one version of a workflow.

    ``input`` is the model of what an order of this workflow carries (its POST body, less ``orderId``
    and ``workflow``): submissions are validated with it, and what it dumps is the order's stored input.
    Give it ``extra="forbid"`` and one or more examples (``json_schema_extra={"examples": [...]}``), which
    the API's document shows and the demo submits.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    version: int = Field(default=1, ge=1, description="orders keep the version they started on")
    description: str = ""
    input: type[BaseModel] | None = Field(default=None, description="the model of an order's input")
    steps: tuple[StepDefinition, ...] = Field(min_length=1, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return refuse_unknown(cls, data, "workflow")

    @field_validator("input")
    @classmethod
    def _input_model(cls, model: type[BaseModel] | None) -> type[BaseModel] | None:
        if model is not None and model.model_config.get("extra") != "forbid":
            raise ValueError(f"input model {model.__name__} must refuse unknown fields: extra='forbid'")
        return model

    @model_validator(mode="after")
    def _unique_names(self) -> WorkflowDefinition:
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"workflow {self.name}: step names must be unique")
        return self

    @model_validator(mode="after")
    def _nothing_unknown(self) -> WorkflowDefinition:
        for step in self.steps:
            models: list[tuple[str, Declared]] = [
                (f"step {step.name}", step),
                (f"step {step.name} retry", step.retry),
            ]
            if step.when is not None:
                models += [(f"step {step.name} condition", part) for part in parts(step.when)]
            for where, model in models:
                if model.unknown():
                    declared = ", ".join(type(model).model_fields)
                    raise ValueError(
                        f"workflow {self.name} version {self.version}, {where}: unknown field "
                        f"{', '.join(model.unknown())} (it declares: {declared})"
                    )
        return self

    @model_validator(mode="after")
    def _conditions_read_declared_input(self) -> WorkflowDefinition:
        for step in self.steps:
            for path in step.when.fields() if step.when is not None else ():
                if not path.startswith("input."):
                    continue
                where = (
                    f"workflow {self.name} version {self.version}, step {step.name}: the condition on {path}"
                )
                if self.input is None:
                    raise ValueError(f"{where} needs an input model: declare input= on the workflow")
                problem = check_input_path(path, self.input)
                if problem:
                    model = f"{self.input.__name__} ({self.input.__module__})"
                    fix = f"; add the field to {model}" if "declares no field" in problem else ""
                    raise ValueError(f"{where}: {problem}{fix}")
        return self

    def examples(self) -> list[dict[str, Any]]:
        """The example inputs its input model declares (none without one)."""
        if self.input is None:
            return []
        extra = self.input.model_config.get("json_schema_extra")
        found = extra.get("examples") if isinstance(extra, dict) else None
        return [dict(e) for e in found if isinstance(e, dict)] if isinstance(found, list) else []

    @model_validator(mode="after")
    def _one_breaker_per_agent(self) -> WorkflowDefinition:
        _check_breakers([self])
        return self

    def revise(self, **changes: Any) -> WorkflowDefinition:
        """A copy with ``changes`` (e.g. ``version`` and ``steps``), validated like a new definition."""
        return type(self).model_validate({**dict(self), **changes})

    @property
    def agents(self) -> list[str]:
        """Every agent the workflow uses, in step order, without repeats."""
        return list(dict.fromkeys(s.agent for s in self.steps))


def _check_breakers(workflows: list[WorkflowDefinition]) -> None:
    # An agent has one circuit breaker (it guards the remote service, not a step), so every step on an
    # agent, in every workflow and version deployed together, must agree on its settings; retries may
    # differ.
    breakers: dict[str, tuple[int, float]] = {}
    for workflow in workflows:
        for step in workflow.steps:
            breaker = (step.retry.breaker_fail_max, step.retry.breaker_reset_seconds)
            if breakers.setdefault(step.agent, breaker) != breaker:
                raise ValueError(f"the steps on agent {step.agent} must agree on its breaker settings")


class WorkflowCatalog(BaseModel):
    """Every workflow a deployment serves, each in every version still deployed.

    The first workflow named is the default of a submission that names none. A version is kept here for
    as long as orders may be in flight on it; an order whose version is no longer here goes to Error.
    """

    model_config = ConfigDict(frozen=True)

    workflows: tuple[WorkflowDefinition, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _valid(self) -> WorkflowCatalog:
        keys = [(w.name, w.version) for w in self.workflows]
        if len(set(keys)) != len(keys):
            raise ValueError("each workflow version must be declared once")
        _check_breakers(list(self.workflows))
        return self

    @classmethod
    def of(cls, *workflows: WorkflowDefinition) -> WorkflowCatalog:
        """A catalog of these definitions."""
        return cls(workflows=workflows)

    @property
    def default(self) -> str:
        """The workflow a submission that names none runs."""
        return self.workflows[0].name

    @property
    def names(self) -> list[str]:
        """Every workflow's name, in declaration order, without repeats."""
        return list(dict.fromkeys(w.name for w in self.workflows))

    def current(self, name: str) -> WorkflowDefinition | None:
        """The latest version of the workflow ``name`` (what new orders take), or None."""
        versions = [w for w in self.workflows if w.name == name]
        return max(versions, key=lambda w: w.version) if versions else None

    def find(self, name: str, version: int) -> WorkflowDefinition | None:
        """One version of one workflow, or None when it is not deployed."""
        return next((w for w in self.workflows if w.name == name and w.version == version), None)

    @property
    def agents(self) -> list[str]:
        """Every agent of every deployed version, in declaration order, without repeats: an agent that the
        latest versions no longer use still serves the orders in flight on an older one."""
        return list(dict.fromkeys(s.agent for w in self.workflows for s in w.steps))

    def policies(self, agent: str) -> dict[tuple[str, int, str], RetryPolicy]:
        """The retry policy of every step on ``agent``, by (workflow, version, step)."""
        return {
            (w.name, w.version, s.name): s.retry for w in self.workflows for s in w.steps if s.agent == agent
        }
