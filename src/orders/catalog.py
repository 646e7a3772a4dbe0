"""The one declaration a team edits: the remote services and the workflows over them, every version.

Everything else follows from here: one agent function and one request queue per service
(``function_app.py``, ``local/servicebus-config.json``, ``infra/app/catalog.json``), one URL setting per
service (``<NAME>_SERVICE_URL``), the simulators' routes, the demo, and the docs' tables. A check in
``make test`` fails, saying what to regenerate, when a generated file falls behind
(``python -m orders.generate``).

Versions: new orders take a workflow's latest version; an order finishes, or is undone, on the version it
started on. To change a workflow, add a version and keep the old one here until no order is in flight on
it (``docs/customizing.md``). An order whose version is no longer declared goes to Error with an alert.
"""

from __future__ import annotations

from engine import Approval, StepDefinition, Test, Timer, WorkflowCatalog, WorkflowDefinition

from .inputs import FulfilmentOrder, ReturnOrder
from .services import inventory, notifications, payment, shipping
from .services.declaration import ServiceDefinition, check_catalog

SERVICES: tuple[ServiceDefinition, ...] = (
    inventory.SERVICE,
    payment.SERVICE,
    shipping.SERVICE,
    notifications.SERVICE,
)

FULFILMENT_V1 = WorkflowDefinition(
    name="order-fulfilment",
    version=1,
    description="Reserve the stock, take the payment, ship the goods unless all are digital, confirm",
    input=FulfilmentOrder,
    # Support staff find a customer's orders: GET /api/orders?customerId=...
    searchable=("customerId",),
    steps=(
        StepDefinition(
            name="reserve-inventory", agent=inventory.SERVICE.name, action="reserve", compensation="release"
        ),
        StepDefinition(
            name="charge-payment", agent=payment.SERVICE.name, action="charge", compensation="refund"
        ),
        StepDefinition(
            name="create-shipment",
            agent=shipping.SERVICE.name,
            action="create",
            compensation="cancel",
            # An order of digital goods only has nothing to ship.
            when=Test(field="input.items[].digital", op="!=", value=True, each="any"),
        ),
        # A confirmation cannot be unsent: no compensation. It carries the shipment's tracking number.
        StepDefinition(name="send-confirmation", agent=notifications.SERVICE.name, action="send"),
    ),
)

# Version 2 waits twice: for a person's fraud review of a large order before the payment, and through a
# cancellation window between the payment and the shipment (a cancel inside it refunds, and ships nothing).
FULFILMENT = FULFILMENT_V1.revise(
    version=2,
    description="Reserve the stock, have a person review a large order, take the payment, keep a "
    "cancellation window open, ship the goods unless all are digital, confirm",
    steps=(
        FULFILMENT_V1.steps[0],
        StepDefinition(
            name="fraud-review",
            when=Test(field="input.total", op=">", value=1000),
            # A day for a person to look; unreviewed, the order is undone (the stock released).
            wait=Approval(deadline_seconds=86_400, on_deadline="compensate", setting="FRAUD_REVIEW_SECONDS"),
        ),
        FULFILMENT_V1.steps[1],
        StepDefinition(
            name="cancellation-window",
            wait=Timer(after_seconds=1_800, setting="CANCELLATION_WINDOW_SECONDS"),
        ),
        *FULFILMENT_V1.steps[2:],
    ),
)

RETURNS_V1 = WorkflowDefinition(
    name="order-return",
    version=1,
    description="Collect the returned goods, refund the customer, put the goods back in stock",
    input=ReturnOrder,
    searchable=("customerId", "originalOrderId"),
    steps=(
        StepDefinition(
            name="collect-return",
            agent=shipping.SERVICE.name,
            action="collect",
            compensation="cancel-collection",
        ),
        StepDefinition(
            name="refund-payment", agent=payment.SERVICE.name, action="credit", compensation="reverse-credit"
        ),
        StepDefinition(
            name="restock-inventory", agent=inventory.SERVICE.name, action="restock", compensation="unstock"
        ),
    ),
)

# Version 2 settles a collected return side by side: the refund, the restocking and the customer's notice
# go out together (a group), so the order waits for the slowest of them, not for their sum. A failure of
# any of them undoes the refund, the restocking and the collection; the notice, which cannot be unsent,
# says only that the return is being settled.
RETURNS = RETURNS_V1.revise(
    version=2,
    description="Collect the returned goods, then side by side refund the customer, put the goods back "
    "in stock and tell the customer",
    steps=(
        RETURNS_V1.steps[0],
        *(step.model_copy(update={"group": "settle-return"}) for step in RETURNS_V1.steps[1:]),
        StepDefinition(
            name="send-return-notice",
            agent=notifications.SERVICE.name,
            action="notify-return",
            group="settle-return",
        ),
    ),
)

CATALOG = WorkflowCatalog(
    workflows=(
        FULFILMENT,
        # Kept while orders that started on them may be in flight (docs/customizing.md, versions).
        FULFILMENT_V1,
        RETURNS,
        RETURNS_V1,
    )
)


# Refuse, at import and so in every test, a step whose service or action is not declared.
check_catalog(SERVICES, CATALOG)
