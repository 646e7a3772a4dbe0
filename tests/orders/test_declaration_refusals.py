"""What the declaration refuses at import, and that each message names what to add (or remove) where.

A small declaration of the tests' own (a shop that charges, issues a card whose number comes back, and
mails it) rather than the example catalog, so that these hold whatever a team declares; and one check
that the real ``src/orders/catalog.py`` refuses, when it is imported, a field its steps do not declare.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import pytest
from pydantic import BaseModel, ConfigDict, Field

from engine.conditions import AllOf, Not, Test
from engine.workflow import RetryPolicy, StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders.services.declaration import (
    AmountBody,
    Document,
    Resource,
    ServiceBody,
    ServiceDefinition,
    ServiceResult,
    check_catalog,
)

CATALOG_FILE = Path(__file__).resolve().parents[2] / "src" / "orders" / "catalog.py"


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str
    quantity: int
    unit_price: float = Field(alias="unitPrice")


class Purchase(BaseModel):
    """The shop's input."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"items": [{"sku": "a", "quantity": 1, "unitPrice": 5}], "currency": "EUR", "to": "x"}
            ]
        },
    )

    items: list[Line]
    currency: str
    to: str | None = None


class Gift(Purchase):
    """The shop's input with a flag."""

    gift: bool = False


class Card(ServiceResult):
    card_number: str


class CardMail(ServiceBody):
    needs = ("cardNumber",)

    card_number: str

    @classmethod
    def build(cls, document: Document) -> Self:
        return cls.model_validate({"orderId": document.order_id, "cardNumber": document.result("cardNumber")})


class MaybeCardMail(CardMail):
    needs: ClassVar[tuple[str, ...]] = ()
    may_use = ("cardNumber",)


def service(name: str, **resource: Any) -> ServiceDefinition:
    """A service of one resource; ``resource`` overrides its fields."""
    fields: dict[str, Any] = {
        "collection": "things",
        "apply": "make",
        "undo": "unmake",
        "body": AmountBody,
        "applied": "made",
        "undone": "unmade",
        "rejection": "no",
        **resource,
    }
    return ServiceDefinition(name=name, description="a service of the tests", resources=(Resource(**fields),))


PAY = service("pay")
CARDS = service("cards", result=Card)
MAIL = service("mail", undo=None, undone=None, body=CardMail)
CHARGE = StepDefinition(name="charge", agent="pay", action="make", compensation="unmake")
ISSUE = StepDefinition(name="issue", agent="cards", action="make", compensation="unmake")
SEND = StepDefinition(name="send", agent="mail", action="make")


def shop(*steps: StepDefinition, **changes: Any) -> WorkflowDefinition:
    """The shop's workflow with ``steps``, validated as a declaration is."""
    return WorkflowDefinition.model_validate(
        {"name": "shop", "version": 3, "input": Purchase, "steps": steps, **changes}
    )


def refused(services: tuple[ServiceDefinition, ...], *steps: StepDefinition) -> str:
    """The message the catalog's check gives the shop with ``steps`` on ``services``."""
    with pytest.raises(ValueError) as caught:
        check_catalog(services, WorkflowCatalog.of(shop(*steps)))
    return str(caught.value)


def test_the_shop_itself_is_accepted() -> None:
    check_catalog((PAY, CARDS, MAIL), WorkflowCatalog.of(shop(CHARGE, ISSUE, SEND)))


# ---- unknown fields --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("steps", "changes", "message"),
    [
        (
            (
                StepDefinition(
                    name="send",
                    agent="mail",
                    action="make",
                    when=Test(field="input.to", op="exists"),
                    parallel=True,
                    delay_seconds=60,
                ),
            ),
            {},
            "workflow shop version 3, step send: unknown field delay_seconds, parallel (it declares: name, ",
        ),
        (
            (CHARGE.model_copy(update={"retry": RetryPolicy(max_tries=2, jitter=True)}),),
            {},
            "workflow shop version 3, step charge retry: unknown field jitter (it declares: max_tries, ",
        ),
        (
            (
                SEND.model_copy(
                    update={"when": AllOf(all_of=(Not(not_=Test(field="input.to", op="exists", case=1)),))}
                ),
            ),
            {},
            "workflow shop version 3, step send condition: unknown field case (it declares: field, op, ",
        ),
        ((CHARGE,), {"timeout": 30}, "workflow 'shop': unknown field timeout (a workflow declares: name, "),
    ],
    ids=["step", "retry policy", "condition inside others", "workflow"],
)
def test_an_unknown_field_is_refused_naming_the_workflow_and_the_field(
    steps: tuple[StepDefinition, ...], changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        shop(*steps, **changes)


def test_an_unknown_field_of_a_service_or_a_resource_is_refused_naming_them() -> None:
    with pytest.raises(
        ValueError, match=re.escape("service 'pay': unknown field region (a service declares:")
    ):
        ServiceDefinition(name="pay", description="d", resources=PAY.resources, region="eu")
    with pytest.raises(ValueError, match=re.escape("service pay, resource things: unknown field retries")):
        service("pay", retries=3)


def test_the_real_catalog_refuses_an_unknown_field_when_it_is_imported() -> None:
    """``src/orders/catalog.py`` as it is, with one step given a field steps do not declare."""
    text = CATALOG_FILE.read_text(encoding="utf-8")
    assert "StepDefinition(" in text
    broken = text.replace("StepDefinition(", "StepDefinition(parallel=True, ", 1)
    spec = importlib.util.spec_from_loader("orders._catalog_under_test", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "orders"  # its relative imports are the real catalog's
    try:
        with pytest.raises(ValueError, match=r"workflow \S+ version \d+, step \S+: unknown field parallel"):
            exec(compile(broken, str(CATALOG_FILE), "exec"), module.__dict__)
    finally:
        sys.modules.pop(spec.name, None)


# ---- results passed on ----------------------------------------------------------------------------
def test_a_body_that_needs_a_result_no_earlier_step_returns_says_where_to_declare_it() -> None:
    message = refused((PAY, MAIL), CHARGE, SEND)
    assert message == (
        "step send of workflow shop version 3: its body CardMail reads the result 'cardNumber', which no "
        "earlier step returns (they return: none): declare it in the result model (a ServiceResult) of an "
        "earlier step's resource in src/orders/services/<service>.py"
    )
    # Returned, but only by a later step: the step must move after it.
    assert "which no earlier step returns (they return: none): move the step after step issue" in refused(
        (PAY, CARDS, MAIL), CHARGE, SEND, ISSUE
    )


def test_a_body_may_not_need_a_result_of_a_step_that_has_a_condition_only_use_it() -> None:
    conditional = ISSUE.model_copy(update={"when": Test(field="input.to", op="exists")})
    message = refused((PAY, CARDS, MAIL), CHARGE, conditional, SEND)
    assert (
        "its body CardMail needs the result 'cardNumber', which step issue returns only when its " in message
    )
    assert "list 'cardNumber' in the body's may_use instead" in message
    maybe = service("mail", undo=None, undone=None, body=MaybeCardMail)
    check_catalog((PAY, CARDS, maybe), WorkflowCatalog.of(shop(CHARGE, conditional, SEND)))


def test_a_condition_on_a_result_no_earlier_step_returns_is_refused() -> None:
    reads = SEND.model_copy(update={"when": Test(field="results.cardNumbr", op="exists")})
    message = refused((PAY, CARDS, MAIL), CHARGE, ISSUE, reads)
    assert "step send of workflow shop version 3: its condition reads the result 'cardNumbr'" in message
    assert "(they return: cardNumber)" in message


def test_two_steps_returning_one_name_are_refused() -> None:
    again = StepDefinition(name="issue-again", agent="cards", action="make", compensation="unmake")
    assert (
        "step issue-again of workflow shop version 3 returns 'cardNumber', which step issue returns too"
        in (refused((PAY, CARDS, MAIL), CHARGE, ISSUE, again, SEND))
    )


# ---- conditions on the input --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("input.total", "input declares no field 'total' (it declares: currency, items, to)"),
        (
            "input.items[].colour",
            "input.items[] declares no field 'colour' (it declares: quantity, sku, unitPrice)",
        ),
        ("input.items.sku", "items is a list; write items[] to test its elements"),
        ("input.currency[]", "currency is not a list, so it takes no []"),
    ],
)
def test_a_condition_on_a_field_the_input_does_not_declare_names_the_field_and_the_model(
    path: str, problem: str
) -> None:
    step = SEND.model_copy(update={"when": Test(field=path, op="exists")})
    with pytest.raises(
        ValueError, match=re.escape(f"workflow shop version 3, step send: the condition on {path}")
    ):
        shop(CHARGE, ISSUE, step)
    with pytest.raises(ValueError, match=re.escape(problem)):
        shop(CHARGE, ISSUE, step)


def test_a_missing_field_s_message_says_which_model_to_add_it_to() -> None:
    step = SEND.model_copy(update={"when": Test(field="input.total", op=">", value=0)})
    with pytest.raises(ValueError, match=re.escape("add the field to Purchase")):
        shop(CHARGE, ISSUE, step)


@pytest.mark.parametrize(
    ("test", "problem"),
    [
        (
            Test(field="input.items[].quantity", op=">", value="100"),
            'a number, so comparing it with "100" (a text)',
        ),
        (Test(field="input.currency", op="==", value=1), "a text, so comparing it with 1 (a number)"),
        (Test(field="input.currency", op="in", value="EUR"), "in takes a list of values"),
        (Test(field="input.currency", op="in", value=["EUR", 2]), "comparing it with 2 (a number)"),
        (Test(field="input.gift", op=">", value=False), "input.gift is true or false: it has no order"),
        (Test(field="input.gift", op="==", value=None), "comparing it with null"),
    ],
)
def test_a_condition_whose_value_is_not_of_its_input_field_s_type_is_refused(
    test: Test, problem: str
) -> None:
    step = SEND.model_copy(update={"when": test})
    where = f"workflow shop version 3, step send: the condition on {test.field}: "
    with pytest.raises(ValueError, match=re.escape(where) + ".*" + re.escape(problem)):
        shop(CHARGE, ISSUE, step, input=Gift)
    fits = {"number": 100, "text": "EUR", "flag": True}
    kind = "number" if "quantity" in test.field else "flag" if "gift" in test.field else "text"
    op = "==" if test.op in (">", "==") and kind == "flag" else test.op
    value = [fits[kind]] if op in ("in", "not in") else fits[kind]
    shop(
        CHARGE,
        ISSUE,
        SEND.model_copy(update={"when": Test(field=test.field, op=op, value=value)}),
        input=Gift,
    )


class TieredCard(Card):
    tier: Literal["gold", "basic"]


def test_a_condition_on_a_returned_value_is_typed_by_the_service_s_result() -> None:
    tiered = service("cards", result=TieredCard)
    for test, problem in [
        (
            Test(field="results.tier", op="==", value="platinum"),
            'is one of "gold", "basic", never "platinum"',
        ),
        (Test(field="results.cardNumber", op=">", value=5), "a text, so comparing it with 5 (a number)"),
        (Test(field="results.tier.level", op="exists"), "results.tier has no fields"),
    ]:
        message = refused((PAY, tiered, MAIL), CHARGE, ISSUE, SEND.model_copy(update={"when": test}))
        assert f"step send of workflow shop version 3: its condition on {test.field}: " in message
        assert problem in message
        assert "(TieredCard declares it)" in message
    gold = Test(field="results.tier", op="in", value=["gold"])
    check_catalog(
        (PAY, tiered, MAIL), WorkflowCatalog.of(shop(CHARGE, ISSUE, SEND.model_copy(update={"when": gold})))
    )


# ---- steps that cannot be undone --------------------------------------------------------------------
def test_a_step_that_cannot_be_undone_takes_no_compensation_and_one_that_can_must_have_it() -> None:
    unsend = SEND.model_copy(update={"compensation": "unmake"})
    assert "mail's things cannot be undone: remove compensation= from the step" in refused(
        (PAY, CARDS, MAIL), CHARGE, ISSUE, unsend
    )
    bare = CHARGE.model_copy(update={"compensation": None})
    assert "set compensation='unmake'" in refused((PAY, CARDS, MAIL), bare, ISSUE, SEND)
    with pytest.raises(ValueError, match="give both undo and undone"):
        service("mail", undone=None)
