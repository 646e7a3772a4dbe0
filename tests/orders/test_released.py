"""Released workflow versions never change (orders.released): the declaration is held to the shape each
version had when it was released; a change in place is caught, and recording a release adds versions only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.workflow import WorkflowCatalog
from orders import released
from orders.catalog import CATALOG


def test_every_released_version_is_declared_as_it_was_released() -> None:
    assert released.released(), "orders/released_workflows.json holds no released version"
    assert released.changed() == [], "declare a new version instead of changing a released one"


def test_a_change_in_place_is_caught_and_recording_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow = next(w for w in CATALOG.workflows if w.key in released.released())
    step = workflow.steps[-1]
    budget = (step.complete_by_seconds or 30) + 1
    edited = workflow.revise(
        steps=(*workflow.steps[:-1], step.model_copy(update={"complete_by_seconds": budget}))
    )
    catalog = WorkflowCatalog.of(edited)
    assert released.changed(catalog) == [workflow.key]
    kept = tmp_path / "released.json"
    kept.write_text(released.RELEASED.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(released, "RELEASED", kept)
    monkeypatch.setattr(released, "PREVIOUS", tmp_path / "previous.json")
    before = kept.read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        released.record(catalog)
    assert kept.read_text(encoding="utf-8") == before
    # A new version is recorded beside the released ones, which stay as they were.
    newer = edited.revise(version=max(w.version for w in CATALOG.workflows) + 1)
    assert released.record(WorkflowCatalog.of(newer)) == [newer.key]
    after = json.loads(kept.read_text(encoding="utf-8"))
    assert {k: v for k, v in after.items() if k != newer.key} == json.loads(before)
    # The release recorded is the next one's release before: it serves what the catalog recorded declares.
    assert released.previous_release() == {newer.key}


def test_the_release_before_serves_only_released_versions() -> None:
    """New orders take, until the switch flips, only what the release before serves (engine.formats): it
    can name only versions that were released."""
    assert released.previous_release() <= set(released.released())
