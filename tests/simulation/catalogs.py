"""The catalogs the recorded seeds were found on, pinned here: a seed explores what the workflows make of it
(docs/simulation.md, "Seeds drift"), so the regression seeds and the planted bugs run on the workflows they
were found on, whatever the declaration (``orders.catalog``) says today. The fixed seeds and
``make simulate-long`` run the declared catalog.

- ``ENGINE_ONLY``: the example workflows as they were when findings 1 to 10 and the first eight planted
  bugs were found: fulfilment (reserve, charge, ship) and returns (collect, refund, restock), every step
  undone, no condition, no input model, services that take no body and return no values.
- ``CONSTRUCTS``: fulfilment as the example declares it since workflows declare their input, results,
  conditions and steps without undo: reserve, charge (returns ``chargeId``, which its refund names), ship
  unless every item is digital (returns ``trackingNumber``, which its cancel names), and send a
  confirmation that cannot be undone, carrying the tracking number when there is one. Its services are
  declared here too (on the declaration's own classes), so that a change to the example's leaves it be.
- ``WAITS``: fulfilment version 2 as the example declared it when waits came, on the services of
  ``CONSTRUCTS``: reserve; a fraud review (an approval) of an order above 1000; charge; a cancellation
  window (a timer); ship unless every item is digital; confirm. Its review's deadline policy is ``error``
  (the declared one's is ``compensate``, which the fixed seeds run), so that the planted bugs of waits and
  ``test_waits.py`` see an approval decided from Error too. The waits' durations are the run's (their
  settings, drawn from the seed).
- ``CALLBACKS``: fulfilment version 2 as the example declares it since services may answer later: the steps
  of ``WAITS`` with the declared review's deadline policy (``compensate``), on the services of
  ``CONSTRUCTS`` whose charges are ``asynchronous`` (the payment may answer a charge or a refund 202 and call
  back), for the planted bugs of callbacks and ``test_callbacks.py``.
- ``GROUPS``: fulfilment with a group of steps side by side (``group=``), on the services of ``CALLBACKS``
  and a notice that cannot be unsent: reserve; then, together, the charge (whose payment may answer later
  and call back), the shipment unless every item is digital (left out inside the group) and a notice to the
  customer (no undo); then the confirmation, which carries the group's tracking number. No waits (so no
  parking: its seeds draw nothing of them). For the planted bugs of groups and ``test_groups.py``.
- ``UPDATES``: the workflow of ``WAITS`` whose input carries a delivery address that an update may change
  until the shipment starts (``Update``): half the run's customers correct it while the order runs, before
  the shipment, racing it or after it. For the planted bug of updates and ``test_updates.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, computed_field

from engine.conditions import Test
from engine.workflow import Approval, StepDefinition, Timer, Update, WorkflowCatalog, WorkflowDefinition
from orders.services.declaration import (
    AmountBody,
    Document,
    ItemsBody,
    NonEmpty,
    Resource,
    ServiceBody,
    ServiceDefinition,
    ServiceResult,
    check_catalog,
)


def _step(name: str, agent: str, action: str, compensation: str | None) -> StepDefinition:
    return StepDefinition(name=name, agent=agent, action=action, compensation=compensation)


ENGINE_ONLY = WorkflowCatalog(
    workflows=(
        WorkflowDefinition(
            name="order-fulfilment",
            steps=(
                _step("reserve-inventory", "inventory", "reserve", "release"),
                _step("charge-payment", "payment", "charge", "refund"),
                _step("create-shipment", "shipping", "create", "cancel"),
            ),
        ),
        WorkflowDefinition(
            name="order-return",
            steps=(
                _step("collect-return", "shipping", "collect", "cancel-collection"),
                _step("refund-payment", "payment", "credit", "reverse-credit"),
                _step("restock-inventory", "inventory", "restock", "unstock"),
            ),
        ),
    )
)


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sku: str = Field(min_length=1)
    quantity: int = Field(ge=1)
    unit_price: float = Field(alias="unitPrice", ge=0)
    digital: bool = False


class _Order(BaseModel):
    """An order with a physical and a digital item (every step runs), or with digital items only (no
    shipment)."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "customerId": "customer-1",
                    "items": [
                        {"sku": "sku-1", "quantity": 2, "unitPrice": 9.5},
                        {"sku": "ebook-7", "quantity": 1, "unitPrice": 20, "digital": True},
                    ],
                    "currency": "EUR",
                },
                {
                    "customerId": "customer-2",
                    "items": [{"sku": "ebook-7", "quantity": 1, "unitPrice": 12, "digital": True}],
                    "currency": "EUR",
                },
            ]
        },
    )

    customer_id: str = Field(alias="customerId", min_length=1)
    items: list[_Line] = Field(min_length=1)
    currency: str


class _Charge(ServiceResult):
    charge_id: str


class _Shipment(ServiceResult):
    tracking_number: str


class _Confirmation(ServiceBody):
    may_use = ("trackingNumber",)

    customer_id: NonEmpty
    items: int
    tracking_number: str | None = None

    @classmethod
    def build(cls, document: Document) -> Self:
        return cls.model_validate(
            {
                "orderId": document.order_id,
                "customerId": document.input["customerId"],
                "items": sum(item["quantity"] for item in document.input["items"]),
                "trackingNumber": document.result("trackingNumber"),
            }
        )


def _resource(apply: str, undo: str | None, body: type[ServiceBody], **more: object) -> Resource:
    return Resource.model_validate(
        {
            "collection": f"{apply}s",
            "apply": apply,
            "undo": undo,
            "undone": "undone" if undo else None,
            "body": body,
            "applied": "applied",
            "rejection": "refused",
            **more,
        }
    )


CONSTRUCTS_SERVICES: tuple[ServiceDefinition, ...] = (
    ServiceDefinition(
        name="inventory", description="stock", resources=(_resource("reserve", "release", ItemsBody),)
    ),
    ServiceDefinition(
        name="payment",
        description="charges",
        resources=(_resource("charge", "refund", AmountBody, result=_Charge),),
    ),
    ServiceDefinition(
        name="shipping",
        description="shipments",
        resources=(_resource("create", "cancel", ItemsBody, result=_Shipment),),
    ),
    ServiceDefinition(
        name="notifications", description="confirmations", resources=(_resource("send", None, _Confirmation),)
    ),
)

CONSTRUCTS = WorkflowCatalog(
    workflows=(
        WorkflowDefinition(
            name="order-fulfilment",
            input=_Order,
            steps=(
                _step("reserve-inventory", "inventory", "reserve", "release"),
                _step("charge-payment", "payment", "charge", "refund"),
                StepDefinition(
                    name="create-shipment",
                    agent="shipping",
                    action="create",
                    compensation="cancel",
                    when=Test(field="input.items[].digital", op="!=", value=True, each="any"),
                ),
                _step("send-confirmation", "notifications", "send", None),
            ),
        ),
    )
)
check_catalog(CONSTRUCTS_SERVICES, CONSTRUCTS)


class _ReviewedOrder(_Order):
    """``_Order`` with its total (a computed field, stored with the input, as the example's), and a third
    example above the review's threshold."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                *_Order.model_config["json_schema_extra"]["examples"],  # type: ignore[index]
                {
                    "customerId": "customer-3",
                    "items": [{"sku": "tv-65", "quantity": 1, "unitPrice": 1499}],
                    "currency": "EUR",
                },
            ]
        }
    )

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def total(self) -> float:
        return round(sum(item.quantity * item.unit_price for item in self.items), 2)


_CONSTRUCTS_STEPS = CONSTRUCTS.workflows[0].steps
WAITS = WorkflowCatalog(
    workflows=(
        WorkflowDefinition(
            name="order-fulfilment",
            version=2,
            input=_ReviewedOrder,
            steps=(
                _CONSTRUCTS_STEPS[0],
                StepDefinition(
                    name="fraud-review",
                    when=Test(field="input.total", op=">", value=1000),
                    wait=Approval(
                        deadline_seconds=86_400, on_deadline="error", setting="FRAUD_REVIEW_SECONDS"
                    ),
                ),
                _CONSTRUCTS_STEPS[1],
                StepDefinition(
                    name="cancellation-window",
                    wait=Timer(after_seconds=1_800, setting="CANCELLATION_WINDOW_SECONDS"),
                ),
                *_CONSTRUCTS_STEPS[2:],
            ),
        ),
    )
)
check_catalog(CONSTRUCTS_SERVICES, WAITS)


class _DeliveredOrder(_ReviewedOrder):
    """``_ReviewedOrder`` with where the goods go, which the customer may correct until the shipment."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {**example, "deliveryAddress": address}
                for example, address in zip(
                    _ReviewedOrder.model_config["json_schema_extra"]["examples"],  # type: ignore[index]
                    ("1 Main Street", "2 High Street", "3 Low Road"),
                    strict=True,
                )
            ]
        }
    )

    delivery_address: str = Field(alias="deliveryAddress", min_length=1)


# The waits' workflow whose delivery address may change until the shipment starts (in the cancellation
# window, or before): an update races the step that reads it.
UPDATES = WorkflowCatalog(
    workflows=(
        WAITS.workflows[0].revise(
            version=4,
            input=_DeliveredOrder,
            updates=(Update(fields=("deliveryAddress",), until="create-shipment"),),
        ),
    )
)
check_catalog(CONSTRUCTS_SERVICES, UPDATES)

CALLBACKS_SERVICES: tuple[ServiceDefinition, ...] = tuple(
    ServiceDefinition(
        name="payment",
        description="charges, which the provider may answer later",
        resources=(_resource("charge", "refund", AmountBody, result=_Charge, asynchronous=True),),
    )
    if service.name == "payment"
    else service
    for service in CONSTRUCTS_SERVICES
)

_WAITS_STEPS = WAITS.workflows[0].steps
CALLBACKS = WorkflowCatalog(
    workflows=(
        WAITS.workflows[0].model_copy(
            update={
                "steps": (
                    _WAITS_STEPS[0],
                    _WAITS_STEPS[1].model_copy(
                        update={
                            "wait": Approval(
                                deadline_seconds=86_400,
                                on_deadline="compensate",
                                setting="FRAUD_REVIEW_SECONDS",
                            )
                        }
                    ),
                    *_WAITS_STEPS[2:],
                )
            }
        ),
    )
)
check_catalog(CALLBACKS_SERVICES, CALLBACKS)


class _Notice(ServiceBody):
    """A notice to the customer that the order is being settled: it reads the input only (the steps beside
    it in its group return nothing it could read)."""

    customer_id: NonEmpty
    items: int

    @classmethod
    def build(cls, document: Document) -> Self:
        return cls.model_validate(
            {
                "orderId": document.order_id,
                "customerId": document.input["customerId"],
                "items": sum(item["quantity"] for item in document.input["items"]),
            }
        )


GROUPS_SERVICES: tuple[ServiceDefinition, ...] = tuple(
    ServiceDefinition(
        name="notifications",
        description="confirmations and notices",
        resources=(_resource("send", None, _Confirmation), _resource("notify", None, _Notice)),
    )
    if service.name == "notifications"
    else service
    for service in CALLBACKS_SERVICES
)

GROUPS = WorkflowCatalog(
    workflows=(
        WorkflowDefinition(
            name="order-fulfilment",
            version=3,
            input=_Order,
            steps=(
                _CONSTRUCTS_STEPS[0],
                *(step.model_copy(update={"group": "settle"}) for step in _CONSTRUCTS_STEPS[1:3]),
                StepDefinition(
                    name="notify-customer", agent="notifications", action="notify", group="settle"
                ),
                _CONSTRUCTS_STEPS[3],
            ),
        ),
    )
)
check_catalog(GROUPS_SERVICES, GROUPS)

# By name, for the jobs of tests/simulation/pool.py: the workflows, and the services they run on.
PINNED: dict[str, tuple[WorkflowCatalog, Sequence[ServiceDefinition]]] = {
    "engine-only": (ENGINE_ONLY, ()),
    "constructs": (CONSTRUCTS, CONSTRUCTS_SERVICES),
    "waits": (WAITS, CONSTRUCTS_SERVICES),
    "callbacks": (CALLBACKS, CALLBACKS_SERVICES),
    "groups": (GROUPS, GROUPS_SERVICES),
    "updates": (UPDATES, CONSTRUCTS_SERVICES),
}
