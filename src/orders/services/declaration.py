"""What a remote service is, as data: its name, its resources and, for each, the calls that apply and undo
an effect, the body those calls carry and how its simulator answers.

One declaration serves both sides: the Agent's client builds each call's body from the order with the
resource's body model, and the simulator validates what it receives with the same model. Everything else
about a service (its agent function and queue, its URL setting, its Bicep, its simulator's routes) is
derived from the declaration; see :mod:`orders.catalog`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from engine.workflow import WorkflowCatalog

NonEmpty = Annotated[str, Field(min_length=1)]
NAME = r"^[a-z][a-z0-9-]{0,40}$"


class _Wire(BaseModel):
    """Strict types, camelCase on the wire; fields a service does not use are ignored. Strict, so that a
    caller's bug shows up as a 400 at the simulator rather than as a silently coerced value."""

    model_config = ConfigDict(strict=True, alias_generator=to_camel, validate_by_name=False, extra="ignore")


class ServiceBody(_Wire):
    """An apply call's body. Subclasses say how they are built from an order with :meth:`from_order`."""

    order_id: NonEmpty

    @classmethod
    def from_order(cls, order_id: str, order: dict[str, Any]) -> Self:
        """The body for ``order`` (the order's input as stored)."""
        raise NotImplementedError

    def wire(self) -> dict[str, Any]:
        """The JSON body, camelCase."""
        return self.model_dump(by_alias=True, mode="json")


class Item(_Wire):
    """One order line: a SKU and how many of it."""

    sku: NonEmpty
    quantity: Annotated[int, Field(ge=1)]


class ItemsBody(ServiceBody):
    """A body that names the order's items (stock, shipments, returns)."""

    items: Annotated[list[Item], Field(min_length=1)]

    @classmethod
    def from_order(cls, order_id: str, order: dict[str, Any]) -> Self:
        items = [{"sku": i["sku"], "quantity": i["quantity"]} for i in order.get("items", [])]
        return cls.model_validate({"orderId": order_id, "items": items})


class AmountBody(ServiceBody):
    """A body that names the order's total and currency (charges, credits)."""

    amount: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    currency: NonEmpty

    @classmethod
    def from_order(cls, order_id: str, order: dict[str, Any]) -> Self:
        total = round(sum(i["quantity"] * i["unitPrice"] for i in order.get("items", [])), 2)
        return cls.model_validate({"orderId": order_id, "amount": total, "currency": order.get("currency")})


class Resource(BaseModel):
    """One kind of effect a service keeps: an apply call that makes it and a call that undoes it.

    ``POST <base>/<service>/<collection>`` with the step's ``Idempotency-Key`` and the body applies it;
    ``POST <base>/<service>/<collection>/<key>/<undo>`` undoes it. ``apply`` and ``undo`` are the action
    names a workflow's steps use.
    """

    model_config = ConfigDict(frozen=True)

    collection: str = Field(pattern=NAME)
    apply: str = Field(pattern=NAME)
    undo: str = Field(pattern=NAME)
    body: type[ServiceBody]
    # How the simulator answers: the status an applied and an undone effect reports, and the reason a
    # permanent fault gives.
    applied: str
    undone: str
    rejection: str


class ServiceDefinition(BaseModel):
    """A remote service: its name (which names its agent, queue and URL setting) and its resources."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=NAME)
    description: str = Field(min_length=1, description="what its agent does, in a few words")
    resources: tuple[Resource, ...] = Field(min_length=1)

    URL_SETTING_SUFFIX: ClassVar[str] = "_SERVICE_URL"

    @model_validator(mode="after")
    def _unique(self) -> ServiceDefinition:
        actions = [a for r in self.resources for a in (r.apply, r.undo)]
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
    def function_name(self) -> str:
        """The name of its agent function in the Function App."""
        return "agent_" + self.name.replace("-", "_")

    @property
    def actions(self) -> list[str]:
        """Every action name, apply and undo."""
        return [a for r in self.resources for a in (r.apply, r.undo)]

    def resource(self, action: str) -> tuple[Resource, bool]:
        """The resource an action belongs to, and whether it undoes (True) or applies (False)."""
        for resource in self.resources:
            if action in (resource.apply, resource.undo):
                return resource, action == resource.undo
        raise KeyError(f"service {self.name} has no action {action!r}")


def check_catalog(services: tuple[ServiceDefinition, ...], catalog: WorkflowCatalog) -> None:
    """Raise ValueError, saying what to add where, if a step names a service or action not declared."""
    by_name = {s.name: s for s in services}
    if len(by_name) != len(services):
        raise ValueError("each service must be declared once in SERVICES (src/orders/catalog.py)")
    for workflow in catalog.workflows:
        for step in workflow.steps:
            where = f"step {step.name} of workflow {workflow.name} version {workflow.version}"
            service = by_name.get(step.agent)
            if service is None:
                raise ValueError(
                    f"{where} runs on service {step.agent!r}, which is not declared: add its module under "
                    "src/orders/services/ and list its SERVICE in SERVICES in src/orders/catalog.py"
                )
            try:
                resource, undoes = service.resource(step.action)
            except KeyError:
                raise ValueError(
                    f"{where} applies {step.action!r}, which service {service.name} does not declare: add a "
                    f"Resource with apply={step.action!r} to src/orders/services/{service.name}.py"
                ) from None
            if undoes:
                raise ValueError(
                    f"{where} applies {step.action!r}, which is an undo action of {service.name}"
                )
            if step.compensation not in (None, resource.undo):
                raise ValueError(
                    f"{where} is undone by {step.compensation!r}, but {service.name} undoes "
                    f"{step.action!r} with {resource.undo!r}"
                )
    unused = set(by_name) - set(catalog.agents)
    if unused:
        raise ValueError(f"services {', '.join(sorted(unused))} are declared but no workflow uses them")
