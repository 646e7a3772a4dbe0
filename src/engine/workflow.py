"""Workflow definitions as data: ordered steps, each naming its agent, budget, retries and compensation.

A :class:`WorkflowCatalog` holds every definition a deployment serves: each workflow by name, in every
version that orders in flight may still be on. New orders take a workflow's latest version; an order
keeps the version it started on until it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from .conditions import Condition, Declared, check_value, field_at, parts, refuse_unknown, tests_in

# The mark of a sensitive input field in its JSON Schema (``json_schema_extra``): the API's document shows it.
SENSITIVE = "x-sensitive"


def sensitive(until: str | None = None) -> dict[str, Any]:
    """The ``json_schema_extra`` of an input field that must never be shown, nor kept longer than needed:
    ``Field(..., json_schema_extra=sensitive(until="charge-payment"))``.

    Its value is sealed at rest, redacted in every read, and dropped from the stored input once step
    ``until`` is done (completed, left out) or the order is being undone; without ``until`` (or in a
    workflow that has no such step), when the order ends. Name in ``until`` the last step whose call
    reads the field; a field an undo reads takes no ``until``. See :mod:`engine.sealing`."""
    return {"writeOnly": True, SENSITIVE: {"until": until} if until else {}}


@cache
def sensitive_fields(model: type[BaseModel] | None) -> dict[str, str | None]:
    """The input fields ``model`` marks sensitive (wire names), each with the step it is needed until (None:
    until the order ends). The one reader of the mark."""
    if model is None:
        return {}
    found: dict[str, str | None] = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        mark = extra.get(SENSITIVE) if isinstance(extra, dict) else None
        if isinstance(mark, dict):
            until = mark.get("until")
            found[info.alias or name] = until if isinstance(until, str) else None
    return found


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


class Timer(Declared):
    """A step that waits until a time and calls nothing: ``after_seconds`` after its turn comes (the step
    before it done), or the time an input field holds (``until``, an ``input.`` path to an ISO 8601 time;
    a time already past, or an absent value, ends the wait at once).

    ``setting`` names an app setting that, when set, gives ``after_seconds`` instead (a window that is
    short locally and long in Azure); it is read when the wait starts.

    How a timer waits, ends and expires is its kind's (``engine.waits.timer``, named by ``kind``).
    """

    kind: Literal["timer"] = "timer"  # engine.waits.TIMER (tests/engine/test_wait_kinds.py)
    after_seconds: float | None = Field(default=None, ge=0)
    until: str | None = Field(default=None, pattern=r"^input(\.[A-Za-z_][A-Za-z0-9_-]*)+$")
    setting: str | None = Field(default=None, pattern=r"^[A-Z][A-Z0-9_]{0,63}$")

    @model_validator(mode="after")
    def _one_time(self) -> Timer:
        if (self.after_seconds is None) == (self.until is None):
            raise ValueError("a timer declares either after_seconds or until")
        if self.setting is not None and self.after_seconds is None:
            raise ValueError("a timer's setting gives after_seconds: declare after_seconds as its default")
        return self

    def describe(self) -> str:
        """The wait in words, for docs and audit entries."""
        if self.until is not None:
            return f"until the time in {self.until}"
        setting = f" (setting {self.setting})" if self.setting else ""
        return f"{self.after_seconds:g} s after the step before it{setting}"

    @property
    def seconds(self) -> float:
        """How long it waits as declared: its delay (0 when it waits for an input's time)."""
        return self.after_seconds or 0.0


class Approval(Declared):
    """A step that waits for a person to approve or reject it (``POST .../approve`` or ``.../reject``),
    for at most ``deadline_seconds``; then ``on_deadline`` applies: ``compensate`` undoes what was done,
    ``error`` puts the order in Error with an alert for an operator to decide. A reject always undoes.

    How an approval waits, ends and expires is its kind's (``engine.waits.approval``, named by ``kind``)."""

    kind: Literal["approval"] = "approval"  # engine.waits.APPROVAL (tests/engine/test_wait_kinds.py)
    deadline_seconds: float = Field(gt=0)
    on_deadline: Literal["compensate", "error"] = "compensate"
    setting: str | None = Field(
        default=None,
        pattern=r"^[A-Z][A-Z0-9_]{0,63}$",
        description="an app setting that, when set, gives deadline_seconds instead",
    )

    def describe(self) -> str:
        """The wait in words, for docs and audit entries."""
        setting = f" (setting {self.setting})" if self.setting else ""
        return f"an approval within {self.deadline_seconds:g} s{setting}, else {self.on_deadline}"

    @property
    def seconds(self) -> float:
        """How long it waits as declared: its deadline."""
        return self.deadline_seconds


Wait = Timer | Approval


def wait_seconds(wait: Wait) -> float:
    """How long a wait lasts as declared: a timer's delay (0 when it waits for an input's time), an
    approval's deadline."""
    return wait.seconds


class Update(Declared):
    """Input fields (wire names, of the input model's top level) an update to a running order may change,
    until step ``until`` starts: the first step that reads them, whose call (or condition) must see the
    value it will keep. Once that step has started (or been left out), an update of them is refused
    naming it; the steps before it, and every undo, must not read them (the declaration refuses a
    condition or a timer before ``until`` that does)."""

    fields: tuple[str, ...] = Field(min_length=1)
    until: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")


class StepDefinition(Declared):
    """One step: the agent that runs it, its action, the action that undoes it, and when it runs; or a
    wait (a timer or an approval) that calls nothing and has nothing to undo."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    agent: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9-]{0,40}$",
        description="the agent (and its queue) that runs it; None for a wait",
    )
    action: str | None = Field(default=None, description="what the agent does; None for a wait")
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
    wait: Wait | None = Field(
        default=None, discriminator="kind", description="a wait instead of a call (no agent, no action)"
    )
    group: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9-]{0,62}$",
        description="steps next to each other with the same group run side by side: dispatched together, "
        "joined (the next step starts when all are done), and undone together",
    )

    @model_validator(mode="after")
    def _call_or_wait(self) -> StepDefinition:
        if self.wait is None and (self.agent is None or self.action is None):
            raise ValueError(f"step {self.name}: a step names an agent and an action, or declares a wait")
        if self.wait is not None and (self.agent, self.action, self.compensation) != (None, None, None):
            raise ValueError(f"step {self.name}: a wait calls nothing: no agent, action or compensation")
        if self.wait is not None and self.group is not None:
            raise ValueError(f"step {self.name}: a wait cannot be in a group (a group's steps call agents)")
        if self.wait is not None and self.complete_by_seconds is not None:
            raise ValueError(
                f"step {self.name}: a wait takes no complete_by_seconds (it would be ignored): a timer ends "
                "at its time, an approval at its deadline_seconds"
            )
        return self

    @property
    def calls(self) -> bool:
        """Whether the step calls an agent (a wait does not)."""
        return self.wait is None

    @property
    def call_agent(self) -> str:
        """The agent of a step that calls one (ValueError for a wait)."""
        if self.agent is None:
            raise ValueError(f"step {self.name} is a wait: it calls no agent")
        return self.agent


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
    searchable: tuple[str, ...] = Field(
        default=(),
        max_length=5,
        description="input fields (wire names) an order can be found by: GET /api/orders?<field>=<value>",
    )
    updates: tuple[Update, ...] = Field(
        default=(),
        description="the input fields an update of a running order may change, each until a step starts",
    )

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
    def _searchable_inputs(self) -> WorkflowDefinition:
        if not self.searchable:
            return self
        names = (
            {f.alias or n for n, f in self.input.model_fields.items()} if self.input is not None else set()
        )
        unknown = [name for name in self.searchable if name not in names]
        if unknown:
            raise ValueError(f"workflow {self.name}: searchable names no field of its input: {unknown}")
        return self

    @property
    def key(self) -> str:
        """``<workflow>@<version>``: how instances name the versions they serve (``engine.formats``)."""
        return f"{self.name}@{self.version}"

    @property
    def sensitive(self) -> dict[str, str | None]:
        """The input fields its input model marks sensitive, each with the step of this workflow it is
        needed until (None: until the order ends, as for a step it does not have); see :func:`sensitive`."""
        names = {step.name for step in self.steps}
        return {
            field: (until if until in names else None)
            for field, until in sensitive_fields(self.input).items()
        }

    @model_validator(mode="after")
    def _sensitive_inputs(self) -> WorkflowDefinition:
        # A sensitive value is stored sealed: nothing that reads the stored input as it is may name it.
        named = f"workflow {self.name} version {self.version}"
        waits = {step.name for step in self.steps if not step.calls}
        read = {
            path.removeprefix("input.").split(".")[0].removesuffix("[]")
            for step in self.steps
            for path in (
                *(step.when.fields() if step.when is not None else ()),
                *((step.wait.until,) if isinstance(step.wait, Timer) and step.wait.until else ()),
            )
            if path.startswith("input.")
        }
        for field, until in sensitive_fields(self.input).items():
            where = f"{named}: the sensitive input field {field}"
            if field in self.searchable:
                raise ValueError(f"{where} cannot be searchable: a search would find orders by it")
            if field in read:
                raise ValueError(
                    f"{where} is read by a condition or a timer, which see only its sealed value"
                )
            if until in waits:
                raise ValueError(f"{where} is needed until step {until!r}, a wait, which reads no input")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> WorkflowDefinition:
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"workflow {self.name}: step names must be unique")
        return self

    @model_validator(mode="after")
    def _groups_together(self) -> WorkflowDefinition:
        starts = [
            index
            for index, step in enumerate(self.steps)
            if step.group is not None and (index == 0 or self.steps[index - 1].group != step.group)
        ]
        named = f"workflow {self.name} version {self.version}, group"
        groups = [self.steps[index].group for index in starts]
        for group in groups:
            if groups.count(group) > 1:
                raise ValueError(f"{named} {group}: a group's steps must be declared next to each other")
        for index in starts:
            if len(self.group_range(index)) < 2:
                raise ValueError(f"{named} {self.steps[index].group}: a group has at least two steps")
        return self

    def group_range(self, index: int) -> range:
        """The indexes of the steps that run side by side with step ``index`` (its group), itself included:
        just ``index`` for a step in no group."""
        group = self.steps[index].group
        if group is None:
            return range(index, index + 1)
        start, end = index, index + 1
        while start > 0 and self.steps[start - 1].group == group:
            start -= 1
        while end < len(self.steps) and self.steps[end].group == group:
            end += 1
        return range(start, end)

    @model_validator(mode="after")
    def _nothing_unknown(self) -> WorkflowDefinition:
        models: list[tuple[str, Declared]] = []
        for step in self.steps:
            models += [(f"step {step.name}", step), (f"step {step.name} retry", step.retry)]
            if step.when is not None:
                models += [(f"step {step.name} condition", part) for part in parts(step.when)]
            if step.wait is not None:
                models.append((f"step {step.name} wait", step.wait))
        models += [("updates", update) for update in self.updates]
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
            for test in tests_in(step.when):
                if not test.field.startswith("input."):
                    continue  # a result's type is its service's: orders.services.declaration checks it
                where = (
                    f"workflow {self.name} version {self.version}, step {step.name}: the condition on "
                    f"{test.field}"
                )
                if self.input is None:
                    raise ValueError(f"{where} needs an input model: declare input= on the workflow")
                problem, annotation = field_at(test.field, self.input)
                if problem:
                    model = f"{self.input.__name__} ({self.input.__module__})"
                    fix = f"; add the field to {model}" if "declares no field" in problem else ""
                    raise ValueError(f"{where}: {problem}{fix}")
                mistyped = check_value(test, annotation)
                if mistyped:
                    raise ValueError(f"{where}: {mistyped}")
        return self

    @model_validator(mode="after")
    def _timers_read_declared_input(self) -> WorkflowDefinition:
        for step in self.steps:
            if not isinstance(step.wait, Timer) or step.wait.until is None:
                continue
            named = f"workflow {self.name} version {self.version}, step {step.name}"
            where = f"{named}: the timer on {step.wait.until}"
            if self.input is None:
                raise ValueError(f"{where} needs an input model: declare input= on the workflow")
            problem = field_at(step.wait.until, self.input)[0] or _not_a_time(step.wait.until, self.input)
            if problem:
                raise ValueError(f"{where}: {problem}")
        return self

    @model_validator(mode="after")
    def _updates_declared(self) -> WorkflowDefinition:
        named = f"workflow {self.name} version {self.version}, updates"
        if not self.updates:
            return self
        if self.input is None:
            raise ValueError(f"{named} need an input model: declare input= on the workflow")
        names = {f.alias or n for n, f in self.input.model_fields.items()}
        steps = [step.name for step in self.steps]
        seen: set[str] = set()
        for update in self.updates:
            if update.until not in steps:
                raise ValueError(f"{named}: until names no step of the workflow: {update.until!r}")
            fence = steps.index(update.until)
            for field in update.fields:
                where = f"{named}: the field {field}"
                if field not in names:
                    raise ValueError(f"{where} is not a field of {self.input.__name__}")
                if field in seen:
                    raise ValueError(f"{where} is named by two updates")
                seen.add(field)
                if field in self.searchable or field in self.sensitive:
                    kind = "searchable" if field in self.searchable else "sensitive"
                    raise ValueError(f"{where} is {kind}: an update cannot change it")
                for step in self.steps[:fence]:
                    if _reads(step, field):
                        raise ValueError(
                            f"{where} is read by step {step.name}, before {update.until}: name "
                            f"until={step.name!r}, the first step that reads it"
                        )
        return self

    def update_of(self, field: str) -> Update | None:
        """The declared update that lets ``field`` change, or None."""
        return next((u for u in self.updates if field in u.fields), None)

    def check_update_fields(self, changes: dict[str, Any]) -> None:
        """ValueError, naming them, for fields of ``changes`` no declared update lets change."""
        undeclared = sorted(f for f in changes if self.update_of(f) is None)
        if undeclared or not changes:
            declared = ", ".join(f for u in self.updates for f in u.fields) or "none"
            raise ValueError(
                f"an update of workflow {self.name} version {self.version} cannot change "
                f"{', '.join(undeclared) or 'nothing'} (it may change: {declared})"
            )

    def updated_input(self, stored: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        """The stored input with ``changes``, validated by the input model and dumped as a submission's is;
        its sensitive fields (which no update changes) as stored. ValueError, saying why, for a field no
        update declares or a value the model refuses."""
        self.check_update_fields(changes)
        model = self.input
        assert model is not None  # an update is declared only with an input model
        declared = {f.alias or n for n, f in model.model_fields.items()}
        hidden = set(self.sensitive)
        # What the model reads: not its computed fields, nor what the submission's envelope stored beside
        # (the order's id), nor a sensitive field (sealed, or gone once no step needs it).
        given = {k: v for k, v in {**stored, **changes}.items() if k in declared and k not in hidden}
        try:
            validated = model.model_validate(given)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
                if not e["loc"] or e["loc"][0] not in hidden  # a sensitive field left out here
            ]
            if problems:
                raise ValueError("the updated input is refused: " + "; ".join(problems)) from None
            validated = model.model_construct(**given)  # refused only for the fields kept as stored
        dumped = validated.model_dump(by_alias=True, mode="json")
        computed = {c.alias or n for n, c in model.model_computed_fields.items()}
        beside = {k: v for k, v in stored.items() if (k not in declared and k not in computed) or k in hidden}
        return {**beside, **dumped}

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
        return list(dict.fromkeys(s.agent for s in self.steps if s.agent is not None))


def _reads(step: StepDefinition, field: str) -> bool:
    """Whether ``step``'s condition or timer reads the input field ``field`` (a top-level wire name)."""
    paths = [*(step.when.fields() if step.when is not None else ())]
    if isinstance(step.wait, Timer) and step.wait.until is not None:
        paths.append(step.wait.until)
    return any(p.split(".")[:2] == ["input", field] or p.startswith(f"input.{field}[]") for p in paths)


def _not_a_time(path: str, model: type[BaseModel]) -> str | None:
    """Why the input field at ``path`` may hold something other than a time with its zone (which a timer
    could not wait for: it would end at once), or None. Asked of the field's own validation, so that a
    text with a strict pattern passes as an ``AwareDatetime`` does."""
    *outer, last = path.split(".")[1:]
    current: type[BaseModel] = model
    for name in outer:  # field_at has walked this path: each is a model
        current = next(
            _unwrap_model(f.annotation) for n, f in current.model_fields.items() if (f.alias or n) == name
        )
    info = next(f for n, f in current.model_fields.items() if (f.alias or n) == last)
    typed: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(typed)

    def accepts(value: str) -> bool:
        try:
            adapter.validate_json(f'"{value}"')  # as a body comes: JSON (which strict models take too)
        except ValidationError:
            return False
        return True

    if not accepts("2026-01-01T00:00:00Z") and not accepts("2026-01-01T00:00:00+00:00"):
        return f"{last} must hold a time with its zone (declare it AwareDatetime): it refuses one"
    for value in ("soon", "2026-01-01T00:00:00"):
        if accepts(value):
            return f"{last} must hold a time with its zone (declare it AwareDatetime): it accepts {value!r}"
    return None


def _unwrap_model(annotation: Any) -> type[BaseModel]:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    raise ValueError(f"{annotation} is not a model")


def _check_breakers(workflows: list[WorkflowDefinition]) -> None:
    # An agent has one circuit breaker (it guards the remote service, not a step), so every step on an
    # agent, in every workflow and version deployed together, must agree on its settings; retries may
    # differ.
    breakers: dict[str, tuple[int, float]] = {}
    for workflow in workflows:
        for step in workflow.steps:
            if step.agent is None:
                continue
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

    def for_new(self, name: str, served: Callable[[str], bool]) -> WorkflowDefinition | None:
        """The version of the workflow ``name`` a new order takes: the latest that ``served`` says every
        instance serves (``engine.formats.Formats.served_by_all``, by ``<workflow>@<version>``); while a
        deployment adds a version, the one before it. None when no version is served by all (a workflow
        this deployment adds, until every instance has it) or none is declared."""
        versions = sorted((w for w in self.workflows if w.name == name), key=lambda w: -w.version)
        return next((w for w in versions if served(w.key)), None)

    def find(self, name: str, version: int) -> WorkflowDefinition | None:
        """One version of one workflow, or None when it is not deployed."""
        return next((w for w in self.workflows if w.name == name and w.version == version), None)

    @property
    def keys(self) -> frozenset[str]:
        """Every version it serves, ``<workflow>@<version>`` (what its instances say they serve)."""
        return frozenset(w.key for w in self.workflows)

    @property
    def agents(self) -> list[str]:
        """Every agent of every deployed version, in declaration order, without repeats: an agent that the
        latest versions no longer use still serves the orders in flight on an older one."""
        return list(dict.fromkeys(s.agent for w in self.workflows for s in w.steps if s.agent is not None))

    def setting_waits(self) -> dict[str, Wait]:
        """Every wait that names an app setting, by the setting's name (the latest version's where
        versions differ)."""
        found: dict[str, Wait] = {}
        for workflow in sorted(self.workflows, key=lambda w: w.version):
            for step in workflow.steps:
                if step.wait is not None and step.wait.setting is not None:
                    found[step.wait.setting] = step.wait
        return dict(sorted(found.items()))

    def wait_settings(self) -> dict[str, float]:
        """Every app setting a wait names, by name, with the duration it declares (the latest version's
        where versions differ): what the setting gives when it is not set."""
        return {name: wait_seconds(wait) for name, wait in self.setting_waits().items()}

    def policies(self, agent: str) -> dict[tuple[str, int, str], RetryPolicy]:
        """The retry policy of every step on ``agent``, by (workflow, version, step)."""
        return {
            (w.name, w.version, s.name): s.retry for w in self.workflows for s in w.steps if s.agent == agent
        }
