"""Order fulfilment, declared as data: the steps, their agents, and the compensations run in reverse."""

from __future__ import annotations

from engine.workflow import StepDefinition, WorkflowDefinition

INVENTORY = "inventory"
PAYMENT = "payment"
SHIPPING = "shipping"

FULFILMENT = WorkflowDefinition(
    name="order-fulfilment",
    steps=(
        StepDefinition(name="reserve-inventory", agent=INVENTORY, action="reserve", compensation="release"),
        StepDefinition(name="charge-payment", agent=PAYMENT, action="charge", compensation="refund"),
        StepDefinition(name="create-shipment", agent=SHIPPING, action="create", compensation="cancel"),
    ),
)
