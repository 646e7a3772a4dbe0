"""Workflow definitions as data: ordered steps, each naming its agent, budget, retries and compensation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RetryPolicy(BaseModel):
    """How an Agent retries transient faults within one attempt of a step."""

    model_config = ConfigDict(frozen=True)

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


class StepDefinition(BaseModel):
    """One step: the agent that runs it, its action, and the action that undoes it."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    agent: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,40}$", description="the agent (and its queue) that runs it"
    )
    action: str
    compensation: str | None = Field(
        default=None, description="the action that undoes it; None if nothing to undo"
    )
    complete_by_seconds: float | None = Field(
        default=None, gt=0, description="the step's budget; None uses the STEP_COMPLETE_BY_SECONDS setting"
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)


class WorkflowDefinition(BaseModel):
    """An ordered list of steps, run forward and compensated in reverse."""

    model_config = ConfigDict(frozen=True)

    name: str
    steps: tuple[StepDefinition, ...] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _unique_names(self) -> WorkflowDefinition:
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError("step names must be unique")
        return self

    @model_validator(mode="after")
    def _one_breaker_per_agent(self) -> WorkflowDefinition:
        # An agent has one circuit breaker (it guards the remote service, not a step), so the steps that
        # share an agent must agree on its settings; their retries may differ.
        breakers: dict[str, tuple[int, float]] = {}
        for step in self.steps:
            breaker = (step.retry.breaker_fail_max, step.retry.breaker_reset_seconds)
            if breakers.setdefault(step.agent, breaker) != breaker:
                raise ValueError(f"the steps on agent {step.agent} must agree on its breaker settings")
        return self

    @property
    def agents(self) -> list[str]:
        """Every agent the workflow uses, in step order, without repeats."""
        return list(dict.fromkeys(s.agent for s in self.steps))
