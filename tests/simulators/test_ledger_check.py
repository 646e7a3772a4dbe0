"""The ledger check shared by the demo and the end-to-end tests, on orders and ledgers written out here.

A catalog of its own: two workflows over two services, one of them in two versions, so that the check is
seen to take each order's steps and services from the version the order ran.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders.catalog import CATALOG
from simulators.ledger_check import check_ledger, idempotency_key

BUY = WorkflowDefinition(
    name="buy",
    steps=(
        StepDefinition(name="hold", agent="stock", action="hold", compensation="free"),
        StepDefinition(name="pay", agent="bank", action="pay", compensation="repay"),
    ),
)
BUY_2 = BUY.revise(
    version=2, steps=(StepDefinition(name="pay-first", agent="bank", action="pay", compensation="repay"),)
)
GIVE_BACK = WorkflowDefinition(
    name="give-back",
    steps=(
        StepDefinition(name="refund", agent="bank", action="credit", compensation="debit"),
        StepDefinition(name="take-back", agent="stock", action="add", compensation="remove"),
    ),
)
TOY = WorkflowCatalog.of(BUY, BUY_2, GIVE_BACK)


def order(order_id: str, workflow: WorkflowDefinition, state: str) -> dict[str, Any]:
    """An order as GET /api/orders/{id} shows it (the fields the check reads)."""
    steps = [{"name": step.name} for step in workflow.steps]
    return {
        "orderId": order_id,
        "workflow": workflow.name,
        "workflowVersion": workflow.version,
        "processState": state,
        "steps": steps,
    }


def ledger_of(*effects: tuple[str, str, str, int]) -> dict[str, dict[str, dict[str, Any]]]:
    """A GET /ledger body from (service, order, step, compensated) effects."""
    book: dict[str, dict[str, dict[str, Any]]] = {"stock": {}, "bank": {}}
    for service, order_id, step, compensated in effects:
        entry = {"orderId": order_id, "applied": 1, "compensated": compensated}
        book[service][idempotency_key(order_id, step)] = entry
    return book


def test_processed_orders_of_each_workflow_and_version_with_every_effect_applied_pass() -> None:
    orders = [
        order("a", BUY, "Processed"),
        order("b", BUY_2, "Processed"),
        order("c", GIVE_BACK, "Processed"),
    ]
    book = ledger_of(
        ("stock", "a", "hold", 0),
        ("bank", "a", "pay", 0),
        ("bank", "b", "pay-first", 0),
        ("bank", "c", "refund", 0),
        ("stock", "c", "take-back", 0),
    )
    assert check_ledger(orders, book, TOY) == []


@pytest.mark.parametrize(
    ("effects", "found"),
    [
        ([("stock", "a", "hold", 0)], "pay on bank is None"),  # a step's effect is missing
        ([("stock", "a", "hold", 0), ("bank", "a", "pay", 1)], "pay on bank"),  # undone
        # On the service of another step (the check takes each step's service from the catalog).
        ([("bank", "a", "hold", 0), ("bank", "a", "pay", 0)], "hold on stock is None"),
    ],
)
def test_a_processed_order_needs_each_step_applied_on_its_service_and_not_undone(
    effects: list[tuple[str, str, str, int]], found: str
) -> None:
    problems = check_ledger([order("a", BUY, "Processed")], ledger_of(*effects), TOY)
    assert any(found in problem and "Processed" in problem for problem in problems), problems


def test_an_effect_under_a_key_of_no_step_is_a_problem() -> None:
    """A second charge under another key would be a double effect that no compensation knows of."""
    book = ledger_of(("stock", "a", "hold", 0), ("bank", "a", "pay", 0), ("bank", "a", "pay-again", 0))
    (problem,) = check_ledger([order("a", BUY, "Processed")], book, TOY)
    assert "a:pay-again" in problem


def test_compensated_orders_pass_with_effects_undone_or_never_applied() -> None:
    orders = [order("a", BUY, "Compensated"), order("c", GIVE_BACK, "Compensated")]
    book = ledger_of(("stock", "a", "hold", 1), ("bank", "c", "refund", 1))
    assert check_ledger(orders, book, TOY) == []


def test_a_compensated_order_with_an_effect_left_applied_is_a_problem() -> None:
    book = ledger_of(("bank", "c", "refund", 1), ("stock", "c", "take-back", 0))
    (problem,) = check_ledger([order("c", GIVE_BACK, "Compensated")], book, TOY)
    assert "Compensated" in problem and "take-back on stock" in problem


def test_orders_not_finished_or_in_error_are_not_checked() -> None:
    orders = [order("a", BUY, state) for state in ("Pending", "Processing", "Compensating", "Error")]
    assert check_ledger(orders, ledger_of(("stock", "a", "hold", 0)), TOY) == []


def test_a_workflow_version_not_in_the_catalog_or_other_steps_are_problems() -> None:
    unknown = order("a", BUY.revise(version=7), "Processed")
    renamed = {**order("b", BUY, "Processed"), "steps": [{"name": "hold"}]}
    problems = check_ledger([unknown, renamed], ledger_of(), TOY)
    assert len(problems) == 2
    assert "buy version 7 is not in the catalog" in problems[0]
    assert "are not those of buy version 1" in problems[1]


@pytest.mark.parametrize("workflow", CATALOG.workflows, ids=lambda w: f"{w.name}-{w.version}")
def test_the_declared_workflows_are_checked_against_the_declared_catalog(
    workflow: WorkflowDefinition,
) -> None:
    processed = order("p", workflow, "Processed")
    book: dict[str, dict[str, dict[str, Any]]] = {}
    for step in workflow.steps:
        entry = {"orderId": "p", "applied": 1, "compensated": 0}
        book.setdefault(step.agent, {})[idempotency_key("p", step.name)] = entry
    assert check_ledger([processed], book) == []
    last = workflow.steps[-1]
    book[last.agent][idempotency_key("p", last.name)]["compensated"] = 1
    assert len(check_ledger([processed], book)) == 1
