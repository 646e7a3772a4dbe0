"""The ledger check: do the simulators' ledger and the orders' final states agree?

An order says which workflow and version it ran and its steps by name (``GET /api/orders/{id}``); the
catalog says which service runs each step; the Agent sends the step's effect to that service under the
idempotency key ``<orderId>:<stepName>``. So, for every finished order:

- Processed: every step's effect is in its service's ledger under its key, applied and not undone;
- Compensated: no step's effect is left applied (undone, or never applied);
- either way, the ledger holds no effect of the order under any other key (a second effect of one
  step, made under another key, would be a double charge that no compensation knows of).

Orders in Error are not checked: they wait for an operator with whatever they had done. The demo and the
end-to-end tests both run this check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.workflow import WorkflowCatalog
from orders.catalog import CATALOG

Ledger = Mapping[str, Mapping[str, Mapping[str, Any]]]  # GET /ledger: service -> key -> entry
CHECKED = ("Processed", "Compensated")


def idempotency_key(order_id: str, step: str) -> str:
    """The key a step's effect is applied under (the engine's: the same on every attempt)."""
    return f"{order_id}:{step}"


def check_ledger(
    orders: Iterable[Mapping[str, Any]], ledger: Ledger, catalog: WorkflowCatalog = CATALOG
) -> list[str]:
    """What is wrong, one line per problem (none: the check passed).

    ``orders`` are order bodies as ``GET /api/orders/{id}`` answers them; orders not Processed or
    Compensated are skipped. ``ledger`` is the simulators' ``GET /ledger``.
    """
    by_order: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    for service, by_key in ledger.items():
        for key, applied in by_key.items():
            by_order.setdefault(str(applied["orderId"]), {})[(service, key)] = applied
    problems: list[str] = []
    for order in orders:
        state = order.get("processState")
        if state not in CHECKED:
            continue
        order_id, name, version = order["orderId"], order["workflow"], order["workflowVersion"]
        definition = catalog.find(name, version)
        if definition is None:
            problems.append(f"{order_id}: workflow {name} version {version} is not in the catalog")
            continue
        steps = [step["name"] for step in order["steps"]]
        if steps != [step.name for step in definition.steps]:
            problems.append(f"{order_id}: steps {steps} are not those of {name} version {version}")
            continue
        expected = {
            (step.agent, idempotency_key(order_id, step.name)): step.name for step in definition.steps
        }
        effects = by_order.get(order_id, {})
        for service, key in sorted(effects.keys() - expected.keys()):
            problems.append(f"{order_id} ({name}): {service} holds an effect under {key!r}, no step's key")
        for (service, key), step_name in expected.items():
            entry = effects.get((service, key))
            if state == "Processed":
                if entry is None or entry["applied"] != 1 or entry["compensated"] != 0:
                    problems.append(f"{order_id} ({name}) Processed but {step_name} on {service} is {entry}")
            elif entry is not None and entry["applied"] != entry["compensated"]:
                problems.append(f"{order_id} ({name}) Compensated but {step_name} on {service} is {entry}")
    return problems
