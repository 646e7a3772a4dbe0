"""The ledger check shared by the demo and the end-to-end tests, on orders and ledgers written out here.

A catalog of its own: two workflows over two services, one of them in two versions, so that the check is
seen to take each order's steps and services from the version the order ran.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from engine.conditions import Test
from engine.workflow import Approval, StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders.catalog import CATALOG
from orders.services.declaration import Resource, ServiceBody, ServiceDefinition, ServiceResult
from simulators.ledger_check import LedgerReport, check_ledger, idempotency_key, ledger_report

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
    for step, view in zip(workflow.steps, processed["steps"], strict=True):
        if not step.calls:
            view["state"] = "Completed"  # a Processed order's waits are over
    book: dict[str, dict[str, dict[str, Any]]] = {}
    calls = [step for step in workflow.steps if step.calls]  # a wait leaves nothing in a ledger
    for step in calls:
        entry = {"orderId": "p", "applied": 1, "compensated": 0}
        book.setdefault(step.call_agent, {})[idempotency_key("p", step.name)] = entry
    assert check_ledger([processed], book) == []
    last = calls[-1]
    book[last.call_agent][idempotency_key("p", last.name)]["compensated"] = 1
    assert len(check_ledger([processed], book)) == 1


# ---- conditions, steps that cannot be undone, results passed on -------------------------------------
class ShopInput(BaseModel):
    """What an order of the toy shop carries."""

    model_config = ConfigDict(extra="forbid")

    gift: bool = False


class Held(ServiceResult):
    hold_id: str


class Paid(ServiceResult):
    pay_id: str


class Wrapped(ServiceResult):
    wrap_id: str


def _resource(apply: str, undo: str | None = None, result: type[ServiceResult] | None = None) -> Resource:
    return Resource(
        collection=f"{apply}s",
        apply=apply,
        undo=undo,
        body=ServiceBody,
        result=result,
        applied="done",
        undone="undone" if undo else None,
        rejection="no",
    )


TOY_SERVICES = (
    ServiceDefinition(
        name="stock",
        description="stock",
        resources=(
            _resource("hold", "free", Held),
            _resource("add", "remove"),
            _resource("wrap", "unwrap", Wrapped),
        ),
    ),
    ServiceDefinition(
        name="bank",
        description="bank",
        resources=(_resource("pay", "repay", Paid), _resource("credit", "debit")),
    ),
    ServiceDefinition(name="mail", description="mail", resources=(_resource("tell"),)),
)
# Hold, pay, gift-wrap when the order is a gift, then tell the customer (which cannot be undone).
SHOP = WorkflowDefinition(
    name="shop",
    input=ShopInput,
    steps=(
        StepDefinition(name="hold", agent="stock", action="hold", compensation="free"),
        StepDefinition(name="pay", agent="bank", action="pay", compensation="repay"),
        StepDefinition(
            name="wrap",
            agent="stock",
            action="wrap",
            compensation="unwrap",
            when=Test(field="input.gift", op="==", value=True),
        ),
        StepDefinition(name="tell", agent="mail", action="tell"),
    ),
)
SHOPS = WorkflowCatalog.of(SHOP)
HOLD, PAY, WRAP = {"holdId": "h-1"}, {"payId": "p-1"}, {"wrapId": "w-1"}


def shop_order(
    state: str, steps: dict[str, tuple[str, dict[str, Any] | None]], order_id: str = "s"
) -> dict[str, Any]:
    """A shop order whose steps have these (state, result) in the order's view."""
    views = [
        {"name": name, "state": step_state, "result": result} for name, (step_state, result) in steps.items()
    ]
    return {
        "orderId": order_id,
        "workflow": SHOP.name,
        "workflowVersion": SHOP.version,
        "processState": state,
        "steps": views,
    }


def effect(
    result: dict[str, Any] | None = None,
    carried: dict[str, Any] | None = None,
    undone: dict[str, Any] | None = None,
    applied_at: int | None = None,
    undone_at: int | None = None,
    order_id: str = "s",
) -> dict[str, Any]:
    """A ledger entry: applied, with what it returned and carried, and undone if ``undone`` is given."""
    return {
        "orderId": order_id,
        "applied": 1,
        "compensated": int(undone is not None),
        "result": result or {},
        "carried": carried or {},
        "undoCarried": undone,
        "appliedSeq": applied_at,
        "compensatedSeq": undone_at,
    }


def shop_ledger(**by_step: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """A GET /ledger body with these entries of order "s", by step name."""
    book: dict[str, dict[str, dict[str, Any]]] = {"stock": {}, "bank": {}, "mail": {}}
    for name, entry in by_step.items():
        step = next(step for step in SHOP.steps if step.name == name)
        book[step.agent][idempotency_key(str(entry["orderId"]), name)] = entry
    return book


# A gift order processed: every step ran; each call carried what the steps before returned.
PROCESSED_GIFT = shop_order(
    "Processed",
    {
        "hold": ("Completed", HOLD),
        "pay": ("Completed", PAY),
        "wrap": ("Completed", WRAP),
        "tell": ("Completed", {}),
    },
)
PROCESSED_GIFT_LEDGER = shop_ledger(
    hold=effect(HOLD),
    pay=effect(PAY, carried=HOLD),
    wrap=effect(WRAP, carried={**HOLD, **PAY}),
    tell=effect(carried=WRAP),
)


def report(orders: list[dict[str, Any]], book: dict[str, Any]) -> LedgerReport:
    return ledger_report(orders, book, SHOPS, TOY_SERVICES)


def test_values_passed_on_equal_the_values_returned_and_are_counted() -> None:
    found = report([PROCESSED_GIFT], PROCESSED_GIFT_LEDGER)
    assert found.problems == []
    assert (found.orders, found.carrying, found.checked) == (1, 3, 4)
    assert "3 calls carried values passed on, 4 values checked" in found.summary()


@pytest.mark.parametrize(
    ("step", "carried", "found"),
    [
        ("pay", {"holdId": "h-2"}, "its apply of pay carried holdId='h-2', but hold returned 'h-1'"),
        ("tell", {"wrapId": "w-9"}, "its apply of tell carried wrapId='w-9', but wrap returned 'w-1'"),
        # The value was in the order (the step's result) when the call was built, but the call lost it.
        ("tell", {"wrapId": None}, "its apply of tell carried no wrapId, though wrap had returned 'w-1'"),
    ],
)
def test_a_value_passed_on_that_is_not_the_one_returned_is_a_problem(
    step: str, carried: dict[str, Any], found: str
) -> None:
    book = _with(PROCESSED_GIFT_LEDGER, step, carried=carried)
    problems = report([PROCESSED_GIFT], book).problems
    assert any(found in problem for problem in problems), problems
    assert len(problems) == 1, problems


def _with(book: dict[str, dict[str, dict[str, Any]]], step: str, **fields: Any) -> dict[str, Any]:
    """``book`` with fields of the entry of ``step`` (of order "s") changed."""
    changed = {service: dict(entries) for service, entries in book.items()}
    agent = next(s.agent for s in SHOP.steps if s.name == step)
    key = idempotency_key("s", step)
    changed[agent][key] = {**changed[agent][key], **{_wire(name): value for name, value in fields.items()}}
    return changed


def _wire(name: str) -> str:
    return {"undo_carried": "undoCarried", "applied_at": "appliedSeq", "undone_at": "compensatedSeq"}.get(
        name, name
    )


def test_a_value_passed_on_that_its_step_never_returned_is_a_problem() -> None:
    """The wrap was left out: a confirmation that names a wrapping names one that does not exist."""
    order = shop_order(
        "Processed",
        {
            "hold": ("Completed", HOLD),
            "pay": ("Completed", PAY),
            "wrap": ("LeftOut", None),
            "tell": ("Completed", {}),
        },
    )
    book = shop_ledger(
        hold=effect(HOLD), pay=effect(PAY, carried=HOLD), tell=effect(carried={"wrapId": "w-1"})
    )
    (problem,) = report([order], book).problems
    assert "carried wrapId='w-1', which wrap never returned" in problem
    # Carrying the field empty is what the call should do then.
    book = shop_ledger(
        hold=effect(HOLD), pay=effect(PAY, carried=HOLD), tell=effect(carried={"wrapId": None})
    )
    found = report([order], book)
    assert found.problems == [] and found.left_out == 1


def test_an_undo_carries_the_value_its_own_apply_returned() -> None:
    order = shop_order(
        "Compensated",
        {
            "hold": ("Compensated", HOLD),
            "pay": ("Compensated", PAY),
            "wrap": ("LeftOut", None),
            "tell": ("Failed", None),
        },
    )
    book = shop_ledger(hold=effect(HOLD, undone=HOLD), pay=effect(PAY, carried=HOLD, undone=PAY))
    found = report([order], book)
    assert found.problems == []
    assert (found.carrying, found.checked) == (3, 3)
    (problem,) = report([order], _with(book, "pay", undo_carried={"payId": "p-2"})).problems
    assert "its undo of pay carried payId='p-2', but pay returned 'p-1'" in problem


def test_a_field_named_as_a_later_steps_result_is_not_a_value_passed_on() -> None:
    """An apply's body is built from the steps before it: a field named as a later step's result is the
    body's own, not checked (nor counted)."""
    book = _with(PROCESSED_GIFT_LEDGER, "hold", carried={"payId": "anything"})
    found = report([PROCESSED_GIFT], book)
    assert found.problems == [] and found.checked == 4


def test_the_result_an_order_holds_must_be_the_one_its_service_returned() -> None:
    order = {
        **PROCESSED_GIFT,
        "steps": [
            *PROCESSED_GIFT["steps"][:1],
            {"name": "pay", "state": "Completed", "result": {"payId": "p-7"}},
            *PROCESSED_GIFT["steps"][2:],
        ],
    }
    problems = report([order], PROCESSED_GIFT_LEDGER).problems
    assert any(
        "holds {'payId': 'p-7'} as pay's result, but its service returned {'payId': 'p-1'}" in p
        for p in problems
    ), problems


def test_a_step_left_out_is_never_called() -> None:
    order = shop_order(
        "Processed",
        {
            "hold": ("Completed", HOLD),
            "pay": ("Completed", PAY),
            "wrap": ("LeftOut", None),
            "tell": ("Completed", {}),
        },
    )
    book = shop_ledger(hold=effect(HOLD), pay=effect(PAY, carried=HOLD), tell=effect())
    assert report([order], book).problems == []
    (problem,) = report([order], {**book, "stock": {**book["stock"], "s:wrap": effect(WRAP)}}).problems
    assert "wrap was left out but stock applied it" in problem
    # In a Compensated order too.
    compensated = {**order, "processState": "Compensated"}
    undone = shop_ledger(hold=effect(HOLD, undone={}), wrap=effect(WRAP, undone={}))
    (problem,) = report([compensated], undone).problems
    assert "wrap was left out but stock applied it" in problem


def test_only_a_step_with_a_condition_can_be_left_out() -> None:
    order = shop_order(
        "Processed",
        {
            "hold": ("LeftOut", None),
            "pay": ("Completed", PAY),
            "wrap": ("LeftOut", None),
            "tell": ("Completed", {}),
        },
    )
    book = shop_ledger(pay=effect(PAY), tell=effect())
    (problem,) = report([order], book).problems
    assert "hold is LeftOut but declares no condition" in problem


def test_a_processed_order_needs_its_step_that_cannot_be_undone_applied() -> None:
    book = {**PROCESSED_GIFT_LEDGER, "mail": {}}
    (problem,) = report([PROCESSED_GIFT], book).problems
    assert "Processed but tell on mail is None" in problem


COMPENSATED_AFTER_TELL = shop_order(
    "Compensated",
    {
        "hold": ("Compensated", HOLD),
        "pay": ("Compensated", PAY),
        "wrap": ("LeftOut", None),
        "tell": ("Completed", {}),
    },
)


def test_a_compensated_order_may_keep_the_effect_that_cannot_be_undone_applied_before_any_undo() -> None:
    """The confirmation was sent, then the order cancelled: the steps before it are undone, it is not."""
    book = shop_ledger(
        hold=effect(HOLD, undone=HOLD, applied_at=1, undone_at=6),
        pay=effect(PAY, carried=HOLD, undone=PAY, applied_at=2, undone_at=5),
        tell=effect(applied_at=3),
    )
    found = report([COMPENSATED_AFTER_TELL], book)
    assert found.problems == []
    assert (found.kept, found.ordered) == (1, 1)
    # Undone nonetheless: there is no undo route, so something undid it that should not exist.
    (problem,) = report(
        [COMPENSATED_AFTER_TELL], _with(book, "tell", compensated=1, undo_carried={}, undone_at=7)
    ).problems
    assert "tell cannot be undone but mail undid it" in problem
    # Every other step must still be undone.
    (problem,) = report(
        [COMPENSATED_AFTER_TELL], _with(book, "pay", compensated=0, undo_carried=None, undone_at=None)
    ).problems
    assert "Compensated but pay on bank" in problem


def test_an_effect_that_cannot_be_undone_applied_after_an_undo_is_a_problem() -> None:
    """Its step ran while the steps before it were being undone: a cancel did not wait for it to settle."""
    book = shop_ledger(
        hold=effect(HOLD, undone=HOLD, applied_at=1, undone_at=6),
        pay=effect(PAY, carried=HOLD, undone=PAY, applied_at=2, undone_at=4),
        tell=effect(applied_at=5),
    )
    (problem,) = report([COMPENSATED_AFTER_TELL], book).problems
    assert (
        "tell on mail, which cannot be undone, was applied (change 5) after the order's first undo (change 4)"
        in problem
    )


def test_without_the_order_of_changes_a_kept_effect_is_counted_but_not_ordered() -> None:
    """A ledger that did not record the changes' order (an older one) cannot say: the rest is checked."""
    book = shop_ledger(
        hold=effect(HOLD, undone=HOLD), pay=effect(PAY, carried=HOLD, undone=PAY), tell=effect()
    )
    found = report([COMPENSATED_AFTER_TELL], book)
    assert found.problems == [] and (found.kept, found.ordered) == (1, 0)


def test_a_wait_that_ended_badly_lets_no_later_step_be_called_and_a_processed_order_s_waits_are_over() -> (
    None
):
    reviewed = BUY.revise(
        version=3,
        steps=(
            BUY.steps[0],
            StepDefinition(name="review", wait=Approval(deadline_seconds=60)),
            BUY.steps[1],
        ),
    )
    catalog = WorkflowCatalog.of(reviewed)
    rejected = order("r", reviewed, "Compensated")
    rejected["steps"][1].update(state="Failed", lastError="rejected: no")
    # The hold was undone, and the payment after the rejected review never made: the check passes.
    assert check_ledger([rejected], ledger_of(("stock", "r", "hold", 1)), catalog) == []
    # A payment made after the rejection is a problem.
    paid = ledger_of(("stock", "r", "hold", 1), ("bank", "r", "pay", 1))
    (problem,) = check_ledger([rejected], paid, catalog)
    assert "pay on bank was called after review ended without going on (rejected: no)" in problem
    # Processed with its review not over is a problem too.
    processed = order("p", reviewed, "Processed")
    processed["steps"][1]["state"] = "Waiting"
    book = ledger_of(("stock", "p", "hold", 0), ("bank", "p", "pay", 0))
    (problem,) = check_ledger([processed], book, catalog)
    assert "Processed but its wait review is Waiting" in problem
    processed["steps"][1]["state"] = "Completed"
    report = ledger_report(
        [processed, rejected],
        {**book, "stock": {**book["stock"], **ledger_of(("stock", "r", "hold", 1))["stock"]}},
        catalog,
    )
    assert report.problems == [] and report.waits == 2


# ---- every call in its order's trace -----------------------------------------------------------------
TRACE, OTHER_TRACE = "a" * 32, "b" * 32


def in_trace(trace_id: str | None, **by_step: list[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``PROCESSED_GIFT`` as the API shows it in trace ``trace_id``, and its ledger with these steps'
    recorded trace ids (the others' entries have none: from a ledger before trace ids)."""
    book: dict[str, Any] = PROCESSED_GIFT_LEDGER
    for step, trace_ids in by_step.items():
        book = _with(book, step, traceIds=trace_ids)
    return {**PROCESSED_GIFT, "traceId": trace_id}, book


def test_every_call_recorded_in_the_order_s_trace_passes_and_is_counted() -> None:
    order, book = in_trace(TRACE, hold=[TRACE], pay=[TRACE], wrap=[TRACE], tell=[TRACE])
    found = report([order], book)
    assert found.problems == []
    assert found.traced == 4
    assert "4 effects' calls came in their order's trace" in found.summary()


def test_a_call_that_came_in_another_trace_is_a_problem() -> None:
    order, book = in_trace(TRACE, hold=[TRACE], pay=[TRACE, OTHER_TRACE], tell=[])
    found = report([order], book)
    assert found.problems == [f"s (shop): pay's call came in trace {OTHER_TRACE}, not the order's {TRACE}"]
    # Checked: hold's and pay's; tell's calls came in no trace, and wrap's entry is older than trace ids.
    assert found.traced == 2


def test_an_order_not_traced_or_effects_that_recorded_no_trace_are_not_checked() -> None:
    for order, book in (
        in_trace(None, pay=[OTHER_TRACE]),  # the order was not traced
        in_trace(TRACE, pay=[], tell=None),  # its calls came in no trace, or an older ledger
    ):
        found = report([order], book)
        assert (found.problems, found.traced) == ([], 0)
