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

from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition

from .services import inventory, payment, shipping
from .services.declaration import ServiceDefinition

SERVICES: tuple[ServiceDefinition, ...] = (inventory.SERVICE, payment.SERVICE, shipping.SERVICE)

FULFILMENT = WorkflowDefinition(
    name="order-fulfilment",
    version=1,
    description="Reserve the stock, take the payment, ship the goods",
    steps=(
        StepDefinition(
            name="reserve-inventory", agent=inventory.SERVICE.name, action="reserve", compensation="release"
        ),
        StepDefinition(
            name="charge-payment", agent=payment.SERVICE.name, action="charge", compensation="refund"
        ),
        StepDefinition(
            name="create-shipment", agent=shipping.SERVICE.name, action="create", compensation="cancel"
        ),
    ),
)

RETURNS = WorkflowDefinition(
    name="order-return",
    version=1,
    description="Collect the returned goods, refund the customer, put the goods back in stock",
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

CATALOG = WorkflowCatalog(workflows=(FULFILMENT, RETURNS))


def check(services: tuple[ServiceDefinition, ...], catalog: WorkflowCatalog) -> None:
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


check(SERVICES, CATALOG)
