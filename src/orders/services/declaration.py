"""What a remote service is, as data: its name, its resources and, for each, the calls that apply and undo
an effect, the body those calls carry and how its simulator answers.

One declaration serves both sides: the Agent's client builds each call's body from the order's document
(its input and the results of the steps before) with the resource's body model, and the simulator
validates what it receives with the same model and answers with the resource's declared result values.
Everything else about a service (its agent function and queue, its URL setting, its Bicep, its
simulator's routes) is derived from the declaration; see :mod:`orders.catalog`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from engine import (
    Declared,
    StepDefinition,
    Test,
    WorkflowCatalog,
    WorkflowDefinition,
    check_value,
    field_at,
    refuse_unknown,
    tests_in,
)

NonEmpty = Annotated[str, Field(min_length=1)]
NAME = r"^[a-z][a-z0-9-]{0,40}$"


class _Wire(BaseModel):
    """Strict types, camelCase on the wire; fields a service does not use are ignored. Strict, so that a
    caller's bug shows up as a 400 at the simulator rather than as a silently coerced value."""

    model_config = ConfigDict(strict=True, alias_generator=to_camel, validate_by_name=False, extra="ignore")


@dataclass(frozen=True)
class Document:
    """What a body builder receives: the order's id, its input as the workflow's input model stored it
    (camelCase, defaults filled in), and the values the steps before returned, by name (for an undo, the
    step's own values too). The same document, as ``{"input": ..., "results": ...}``, is what a step's
    condition reads."""

    order_id: str
    input: Mapping[str, Any]
    results: Mapping[str, Any]

    def result(self, name: str) -> Any:
        """A value an earlier step returned, or None (its step was left out, or its answer never came)."""
        return self.results.get(name)


class ServiceBody(_Wire):
    """A call's body. Subclasses say how they are built from the order's document with :meth:`build`, and
    name the results they read: ``needs`` (an earlier step that always runs must return each) and
    ``may_use`` (an earlier step may return it; the body copes when it is absent). The catalog refuses at
    import a body that reads a result no earlier step returns.

    ``sensitive`` names the body's fields (wire names) that must not be kept: the Agent sends them, and
    records the call with their values replaced by ``[redacted]`` before the record leaves its process."""

    needs: ClassVar[tuple[str, ...]] = ()
    may_use: ClassVar[tuple[str, ...]] = ()
    sensitive: ClassVar[tuple[str, ...]] = ()

    order_id: NonEmpty

    @classmethod
    def build(cls, document: Document) -> Self:
        """The body for the order: by default its id alone."""
        return cls.model_validate({"orderId": document.order_id})

    def wire(self) -> dict[str, Any]:
        """The JSON body, camelCase."""
        return self.model_dump(by_alias=True, mode="json")

    @classmethod
    def wire_names(cls) -> list[str]:
        """The body's field names on the wire."""
        return [field.alias or name for name, field in cls.model_fields.items()]


class ServiceResult(_Wire):
    """The values a service returns when it applies an effect, which later steps may use. Subclasses
    declare them as fields (camelCase on the wire), e.g. ``charge_id: str`` for ``chargeId``."""

    @classmethod
    def names(cls) -> list[str]:
        """The names the values are passed on by (their wire names)."""
        return [field.alias or name for name, field in cls.model_fields.items()]

    @classmethod
    def simulated(cls, key: str) -> Self:
        """The values a simulator returns for the effect applied under ``key``: the same on every replay of
        the key, different for every key. A text field gets its name and a digest of the key; a field of
        a few choices (``Literal``) one of them, drawn by the digest (so an order's path through a
        condition on it is known from its id). Override for other types."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        values: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            wire = field.alias or name
            choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else ()
            values[wire] = choices[int(digest, 16) % len(choices)] if choices else f"{wire}-{digest}"
        return cls.model_validate(values)


class Item(_Wire):
    """One order line: a SKU and how many of it."""

    sku: NonEmpty
    quantity: Annotated[int, Field(ge=1)]


class ItemsBody(ServiceBody):
    """A body that names the order's items (stock, shipments, returns)."""

    items: Annotated[list[Item], Field(min_length=1)]

    @classmethod
    def build(cls, document: Document) -> Self:
        # Read strictly: an input without items fails the step (and undoes the order), it is not sent empty.
        items = [{"sku": i["sku"], "quantity": i["quantity"]} for i in document.input["items"]]
        return cls.model_validate({"orderId": document.order_id, "items": items})


class AmountBody(ServiceBody):
    """A body that names the order's total and currency (charges, credits), and the payment token the
    order carries, if any: the card's token, sent to the payment service and never kept in a call's
    record."""

    sensitive = ("paymentToken",)

    amount: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    currency: NonEmpty
    payment_token: str | None = None

    @classmethod
    def build(cls, document: Document) -> Self:
        items = document.input["items"]  # strictly: an input without items must not charge 0
        total = round(sum(i["quantity"] * i["unitPrice"] for i in items), 2)
        currency = document.input["currency"]
        token = document.input.get("paymentToken")
        body = {"orderId": document.order_id, "amount": total, "currency": currency, "paymentToken": token}
        return cls.model_validate(body)

    def wire(self) -> dict[str, Any]:
        """The JSON body, without a token the order does not carry."""
        body = super().wire()
        if body.get("paymentToken") is None:
            del body["paymentToken"]
        return body


class Resource(Declared):
    """One kind of effect a service keeps: an apply call that makes it and, unless it cannot be undone, a
    call that undoes it.

    ``POST <base>/<service>/<collection>`` with the step's ``Idempotency-Key`` and the body applies it;
    ``POST <base>/<service>/<collection>/<key>/<undo>`` undoes it. ``apply`` and ``undo`` are the action
    names a workflow's steps use. An effect without ``undo`` (an e-mail sent) is never undone: a later
    failure or a cancel undoes the steps before it, and a cancel that comes while it runs waits for it.

    ``result`` declares the values an apply call's answer carries (a charge id, a tracking number): the
    agent passes exactly these on, and a later step's body, or this one's undo, may read them. The undo
    call's body is ``undo_body`` if declared, else the order's id and this resource's own result values.

    ``asynchronous``: the service may answer an apply or an undo with 202 Accepted and send the outcome
    later to the app's callback route (``POST /api/callbacks/<service>``), signed with the service's
    callback secret; the step waits for it until its ``CompleteBy`` (see ``orders.callbacks``).
    """

    # Declared: unknown fields are kept, and refused by the service that holds the resource, naming itself.
    collection: str = Field(pattern=NAME)
    apply: str = Field(pattern=NAME)
    undo: str | None = Field(default=None, pattern=NAME)
    body: type[ServiceBody]
    undo_body: type[ServiceBody] | None = None
    result: type[ServiceResult] | None = None
    # How the simulator answers: the status an applied and an undone effect reports, and the reason a
    # permanent fault gives.
    applied: str
    undone: str | None = None
    rejection: str
    asynchronous: bool = False

    @model_validator(mode="after")
    def _undo_complete(self) -> Resource:
        if (self.undo is None) != (self.undone is None):
            raise ValueError(
                f"resource {self.collection}: give both undo and undone (an effect that can be undone), "
                "or neither (one that cannot)"
            )
        if self.undo is None and self.undo_body is not None:
            raise ValueError(f"resource {self.collection}: undo_body without an undo")
        for model in (self.body, self.undo_body):
            unknown = set(model.sensitive) - set(model.wire_names()) if model is not None else set()
            if unknown:
                raise ValueError(f"resource {self.collection}: sensitive names no field: {sorted(unknown)}")
        return self

    @property
    def result_names(self) -> list[str]:
        """The values an apply call's answer carries."""
        return self.result.names() if self.result is not None else []

    def simulated(self, key: str) -> dict[str, Any]:
        """The result values a simulator answers for the effect applied under ``key``, on the wire (none if
        the resource declares none): what the simulators, the simulation and the tests expect alike."""
        if self.result is None:
            return {}
        return self.result.simulated(key).model_dump(by_alias=True, mode="json")


class ServiceDefinition(BaseModel):
    """A remote service: its name (which names its agent, queue and URL setting) and its resources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME)
    description: str = Field(min_length=1, description="what its agent does, in a few words")
    resources: tuple[Resource, ...] = Field(min_length=1)

    URL_SETTING_SUFFIX: ClassVar[str] = "_SERVICE_URL"

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return refuse_unknown(cls, data, "service")

    @model_validator(mode="after")
    def _known_resource_fields(self) -> ServiceDefinition:
        for resource in self.resources:
            unknown = resource.unknown()
            if unknown:
                raise ValueError(
                    f"service {self.name}, resource {resource.collection}: unknown field "
                    f"{', '.join(unknown)} (a resource declares: {', '.join(Resource.model_fields)})"
                )
        return self

    @model_validator(mode="after")
    def _unique(self) -> ServiceDefinition:
        actions = [a for r in self.resources for a in (r.apply, r.undo) if a]
        if len(set(actions)) != len(actions):
            raise ValueError(f"service {self.name}: action names must be unique")
        collections = [r.collection for r in self.resources]
        if len(set(collections)) != len(collections):
            raise ValueError(f"service {self.name}: collection names must be unique")
        return self

    @property
    def url_setting(self) -> str:
        """The app setting that holds the service's base URL, e.g. ``INVENTORY_SERVICE_URL``."""
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper()) + self.URL_SETTING_SUFFIX

    @property
    def callback_secret_setting(self) -> str | None:
        """The app setting holding the secret its callbacks are signed with, e.g.
        ``PAYMENT_CALLBACK_SECRET``; None for a service that always answers at once."""
        if not any(r.asynchronous for r in self.resources):
            return None
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper()) + "_CALLBACK_SECRET"

    @property
    def function_name(self) -> str:
        """The name of its agent function in the Function App."""
        return "agent_" + self.name.replace("-", "_")

    @property
    def actions(self) -> list[str]:
        """Every action name, apply and undo."""
        return [a for r in self.resources for a in (r.apply, r.undo) if a]

    def resource(self, action: str) -> tuple[Resource, bool]:
        """The resource an action belongs to, and whether it undoes (True) or applies (False)."""
        for resource in self.resources:
            if action == resource.apply or (resource.undo and action == resource.undo):
                return resource, action == resource.undo
        raise KeyError(f"service {self.name} has no action {action!r}")


def check_catalog(services: tuple[ServiceDefinition, ...], catalog: WorkflowCatalog) -> None:
    """Raise ValueError, saying what to add where, if the workflows and the services disagree: a step on
    a service or action not declared, a compensation its resource does not have (or a missing one), a
    workflow without an input model or with an example it refuses, a body or a condition that reads a
    result no earlier step returns, a result name two steps of one workflow return."""
    by_name = {s.name: s for s in services}
    if len(by_name) != len(services):
        raise ValueError("each service must be declared once in SERVICES (src/orders/catalog.py)")
    for workflow in catalog.workflows:
        _check_input(workflow)
        returned: dict[str, tuple[str, bool]] = {}  # result name -> (step, whether that step always runs)
        producers = {  # every result name any step returns, to say where a misplaced reader should go
            name: step.name
            for step in workflow.steps
            if step.agent is not None
            and step.action is not None
            and step.agent in by_name
            and step.action in by_name[step.agent].actions
            for name in by_name[step.agent].resource(step.action)[0].result_names
        }
        result_models = {  # the model that declares each result name, to type a condition on it
            name: model
            for step in workflow.steps
            if step.name in producers.values()
            for model in [by_name[step.call_agent].resource(step.action or "")[0].result]
            if model is not None
            for name in model.names()
        }
        # A group's steps run side by side: none reads what another returns, so what they return is known
        # only after the group (held here until then).
        beside: dict[str, tuple[str, bool]] = {}
        for index, step in enumerate(workflow.steps):
            if step.group is None or index == 0 or workflow.steps[index - 1].group != step.group:
                returned.update(beside)
                beside = {}
            where = f"step {step.name} of workflow {workflow.name} version {workflow.version}"
            for test in tests_in(step.when):
                if test.field.startswith("results."):
                    name = test.field.split(".")[1].removesuffix("[]")
                    _check_reads(where, "its condition", name, returned, producers, required=False)
                    _check_result_test(where, test, result_models[name])
            if not step.calls:
                continue  # a wait calls no service: nothing of a service's to check
            resource = _resource(by_name, step, where)
            _check_compensation(resource, step, where, by_name[step.call_agent].name)
            _check_body(where, resource.body, returned, producers)
            own = {name: (step.name, step.when is None) for name in resource.result_names}
            if resource.undo_body is not None:
                _check_body(where + " (its undo)", resource.undo_body, {**returned, **own}, producers)
            for name in resource.result_names:
                clash = returned.get(name) or beside.get(name)
                if clash is not None:
                    raise ValueError(
                        f"{where} returns {name!r}, which step {clash[0]} returns too: rename one "
                        "of the fields in their services' result models"
                    )
            (beside if step.group is not None else returned).update(own)
    unused = set(by_name) - set(catalog.agents)
    if unused:
        raise ValueError(f"services {', '.join(sorted(unused))} are declared but no workflow uses them")


def _check_input(workflow: WorkflowDefinition) -> None:
    named = f"workflow {workflow.name} version {workflow.version}"
    if workflow.input is None:
        raise ValueError(f"{named} declares no input: give it input=<a pydantic model of its POST body>")
    taken = {f.alias or n for n, f in workflow.input.model_fields.items()} & {"orderId", "workflow"}
    if taken:
        raise ValueError(
            f"{named}: its input model {workflow.input.__name__} declares {', '.join(sorted(taken))}, which "
            "the submission's envelope takes: rename the field"
        )
    examples = workflow.examples()
    if not examples:
        raise ValueError(
            f"{named}: its input model {workflow.input.__name__} has no example: add "
            "json_schema_extra={'examples': [...]} to its model_config"
        )
    for example in examples:
        try:
            workflow.input.model_validate(example)
        except ValidationError as exc:
            raise ValueError(f"{named}: an example of {workflow.input.__name__} is refused: {exc}") from None


def _check_result_test(where: str, test: Test, model: type[ServiceResult]) -> None:
    # A returned value is typed by its service's result model, as an input field by the input model.
    problem, annotation = field_at(test.field, model)
    mistyped = problem or check_value(test, annotation)
    if mistyped:
        raise ValueError(f"{where}: its condition on {test.field}: {mistyped} ({model.__name__} declares it)")


def _resource(by_name: dict[str, ServiceDefinition], step: StepDefinition, where: str) -> Resource:
    service = by_name.get(step.call_agent)
    if service is None:
        raise ValueError(
            f"{where} runs on service {step.agent!r}, which is not declared: add its module under "
            "src/orders/services/ and list its SERVICE in SERVICES in src/orders/catalog.py"
        )
    try:
        resource, undoes = service.resource(step.action or "")
    except KeyError:
        raise ValueError(
            f"{where} applies {step.action!r}, which service {service.name} does not declare: add a "
            f"Resource with apply={step.action!r} to src/orders/services/{service.name}.py"
        ) from None
    if undoes:
        raise ValueError(f"{where} applies {step.action!r}, which is an undo action of {service.name}")
    return resource


def _check_compensation(resource: Resource, step: StepDefinition, where: str, service: str) -> None:
    if step.compensation == resource.undo:
        return
    if step.compensation is None:
        raise ValueError(
            f"{where} has no compensation, but {service} undoes {step.action!r} with {resource.undo!r}: "
            f"set compensation={resource.undo!r}"
        )
    if resource.undo is None:
        raise ValueError(
            f"{where} is undone by {step.compensation!r}, but {service}'s {resource.collection} cannot be "
            "undone: remove compensation= from the step (it is never undone), or declare the undo on the "
            f"resource in src/orders/services/{service}.py"
        )
    raise ValueError(
        f"{where} is undone by {step.compensation!r}, but {service} undoes {step.action!r} with "
        f"{resource.undo!r}: set compensation={resource.undo!r}"
    )


def _check_body(
    where: str, body: type[ServiceBody], returned: dict[str, tuple[str, bool]], producers: dict[str, str]
) -> None:
    for name in body.needs:
        _check_reads(where, f"its body {body.__name__}", name, returned, producers, required=True)
    for name in body.may_use:
        _check_reads(where, f"its body {body.__name__}", name, returned, producers, required=False)


def _check_reads(
    where: str,
    reader: str,
    name: str,
    returned: dict[str, tuple[str, bool]],
    producers: dict[str, str],
    required: bool,
) -> None:
    if name not in returned:
        known = ", ".join(sorted(returned)) or "none"
        later = producers.get(name)
        fix = (
            f"move the step after step {later}, which returns it"
            if later
            else "declare it in the result model (a ServiceResult) of an earlier step's resource in "
            "src/orders/services/<service>.py"
        )
        raise ValueError(
            f"{where}: {reader} reads the result {name!r}, which no earlier step returns (they return: "
            f"{known}): {fix}"
        )
    producer, always = returned[name]
    if required and not always:
        raise ValueError(
            f"{where}: {reader} needs the result {name!r}, which step {producer} returns only when its "
            f"condition holds: list {name!r} in the body's may_use instead, and build it without the value"
        )
