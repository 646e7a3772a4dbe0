"""The declaration's own checks, and the documentation's tables rendered from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders import catalog_docs
from orders.catalog import CATALOG, SERVICES
from orders.inputs import FulfilmentOrder
from orders.services.declaration import check_catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "customizing.md"


def workflow(*steps: StepDefinition, version: int = 1) -> WorkflowDefinition:
    return WorkflowDefinition(name="w", version=version, input=FulfilmentOrder, steps=steps)


FIRST = SERVICES[0]
APPLY, UNDO = FIRST.resources[0].apply, FIRST.resources[0].undo


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
            StepDefinition(name="a", agent=FIRST.name, action=APPLY, compensation="something-else"),
            f"undoes '{APPLY}' with '{UNDO}'",
        ),
    ],
)
def test_a_step_that_does_not_match_the_declaration_says_what_to_add_where(
    step: StepDefinition, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(workflow(step)))


def test_a_declared_service_no_workflow_uses_is_refused() -> None:
    step = StepDefinition(name="a", agent=FIRST.name, action=APPLY, compensation=UNDO)
    with pytest.raises(ValueError, match="no workflow uses"):
        check_catalog(SERVICES, WorkflowCatalog.of(workflow(step)))


def test_a_compensation_must_be_the_resources_undo_and_only_an_undoable_step_has_one() -> None:
    forgotten = StepDefinition(name="a", agent=FIRST.name, action=APPLY)
    with pytest.raises(ValueError, match=f"set compensation='{UNDO}'"):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(workflow(forgotten)))
    final = next(s for s in SERVICES for r in s.resources if r.undo is None)
    resource = next(r for r in final.resources if r.undo is None)
    invented = StepDefinition(name="a", agent=final.name, action=resource.apply, compensation="unsend")
    with pytest.raises(ValueError, match="cannot be undone: remove compensation="):
        check_catalog((final,), WorkflowCatalog.of(workflow(invented)))


def test_a_workflow_without_an_input_model_or_an_example_is_refused() -> None:
    step = StepDefinition(name="a", agent=FIRST.name, action=APPLY, compensation=UNDO)
    bare = WorkflowDefinition(name="w", steps=(step,))
    with pytest.raises(ValueError, match="declares no input: give it input="):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(bare))

    class NoExample(BaseModel):
        model_config = ConfigDict(extra="forbid")
        note: str

    with pytest.raises(ValueError, match="has no example"):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(bare.revise(input=NoExample)))

    class BadExample(NoExample):
        model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"note": 3}]})

    with pytest.raises(ValueError, match="an example of BadExample is refused"):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(bare.revise(input=BadExample)))


def test_new_orders_take_the_latest_version_and_every_version_is_found() -> None:
    step = StepDefinition(name="a", agent=FIRST.name, action=APPLY, compensation=UNDO)
    one, two = workflow(step), workflow(step, version=2)
    catalog = WorkflowCatalog.of(one, two)
    assert catalog.current("w") is two and catalog.find("w", 1) is one and catalog.find("w", 3) is None
    with pytest.raises(ValueError, match="declared once"):
        WorkflowCatalog.of(one, one)
    assert one.revise(version=5).version == 5
    with pytest.raises(ValueError):
        one.revise(steps=(step, step))  # revised definitions are validated like new ones


def test_an_input_field_the_envelope_takes_is_refused() -> None:
    class Clash(BaseModel):
        model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"workflow": "x"}]})
        workflow: str

    step = StepDefinition(name="a", agent=FIRST.name, action=APPLY, compensation=UNDO)
    clashing = WorkflowDefinition(name="w", input=Clash, steps=(step,))
    with pytest.raises(ValueError, match="declares workflow, which the submission's envelope takes"):
        check_catalog(SERVICES[:1], WorkflowCatalog.of(clashing))
