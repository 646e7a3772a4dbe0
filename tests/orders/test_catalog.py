"""The declaration's own checks, and the documentation's tables rendered from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders import catalog_docs
from orders.catalog import CATALOG, SERVICES
from orders.services.declaration import check_catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "customizing.md"


def workflow(*steps: StepDefinition, version: int = 1) -> WorkflowDefinition:
    return WorkflowDefinition(name="w", version=version, steps=steps)


def test_the_docs_table_is_the_catalog() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert catalog_docs.update(text, catalog_docs.render(SERVICES, CATALOG)) == text, (
        "regenerate it with: python -m orders.generate"
    )


def test_a_docs_page_without_the_generated_part_is_refused() -> None:
    with pytest.raises(ValueError, match="generated"):
        catalog_docs.update("# nothing here\n", "table")


def test_every_service_in_the_catalog_is_declared_and_used() -> None:
    assert {s.name for s in SERVICES} == set(CATALOG.agents)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (StepDefinition(name="a", agent="nowhere", action="x"), "not declared: add its module"),
        (StepDefinition(name="a", agent=SERVICES[0].name, action="no-such"), "add a Resource with apply"),
        (
            StepDefinition(name="a", agent=SERVICES[0].name, action=SERVICES[0].resources[0].undo),
            "is an undo action",
        ),
        (
            StepDefinition(
                name="a",
                agent=SERVICES[0].name,
                action=SERVICES[0].resources[0].apply,
                compensation="something-else",
            ),
            "undoes",
        ),
    ],
)
def test_a_step_that_does_not_match_the_declaration_says_what_to_add_where(
    step: StepDefinition, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(workflow(step)))


def test_a_declared_service_no_workflow_uses_is_refused() -> None:
    first = SERVICES[0]
    step = StepDefinition(name="a", agent=first.name, action=first.resources[0].apply)
    with pytest.raises(ValueError, match="no workflow uses"):
        check_catalog(SERVICES, WorkflowCatalog.of(workflow(step)))


def test_new_orders_take_the_latest_version_and_every_version_is_found() -> None:
    first = SERVICES[0]
    step = StepDefinition(name="a", agent=first.name, action=first.resources[0].apply)
    one, two = workflow(step), workflow(step, version=2)
    catalog = WorkflowCatalog.of(one, two)
    assert catalog.current("w") is two and catalog.find("w", 1) is one and catalog.find("w", 3) is None
    with pytest.raises(ValueError, match="declared once"):
        WorkflowCatalog.of(one, one)
    assert one.revise(version=5).version == 5
    with pytest.raises(ValueError):
        one.revise(steps=(step, step))  # revised definitions are validated like new ones
