"""Workflow versions are promises: once released, a declared (workflow, version) never changes.

An order keeps the workflow version it started on until it ends, across deployments, so a released
version's steps, conditions, waits, groups, retries, budgets and input contract must stay what they were.
``released_workflows.json`` beside this module holds the shape of every version as it was released; the
tests hold the declaration to it (tests/orders/test_released.py). A change is a new version.

    python -m orders.released --record   # at a release: add the versions declared since (never changes one)

``previous_release.json`` names the versions the release before this one serves: until the formats
switch flips, its instances may run beside this release's and claim new orders, so new orders take only
versions it serves (``engine.formats.Formats.served_by_all``). ``--record`` writes it for the next release.

What the shape leaves out is what does not change how an order runs or which inputs it accepts: the input
model's titles, descriptions and examples, and how a field is kept at rest (its sensitivity, a storage
format with its own entry in CHANGELOG.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine import WorkflowCatalog, WorkflowDefinition

from . import release
from .catalog import CATALOG

RELEASED = Path(__file__).with_name("released_workflows.json")
PREVIOUS = Path(__file__).with_name("previous_release.json")
# JSON Schema keywords that document a field or say how it is stored, not what is accepted.
_NOT_SHAPE = frozenset({"title", "description", "examples", "writeOnly", "readOnly"})


def shape(workflow: WorkflowDefinition) -> dict[str, Any]:
    """What a version promises the orders running on it: its steps as declared and its input contract."""
    steps = [step.model_dump(mode="json") for step in workflow.steps]
    schema = workflow.input.model_json_schema() if workflow.input is not None else None
    return json.loads(json.dumps({"steps": steps, "input": _contract(schema)}, sort_keys=True, default=str))


def _contract(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _contract(v) for k, v in node.items() if k not in _NOT_SHAPE and not k.startswith("x-")}
    if isinstance(node, list):
        return [_contract(v) for v in node]
    return node


def released() -> dict[str, Any]:
    """Every released version's shape, by ``<workflow>@<version>``."""
    return dict(json.loads(RELEASED.read_text(encoding="utf-8"))) if RELEASED.exists() else {}


def previous_release() -> frozenset[str]:
    """The versions (``<workflow>@<version>``) the release before this one serves."""
    kept = json.loads(PREVIOUS.read_text(encoding="utf-8"))
    return frozenset(kept["serves"])


def changed(catalog: WorkflowCatalog = CATALOG) -> list[str]:
    """The released versions whose declaration differs from their release (each must be a new version)."""
    kept = released()
    return [w.key for w in catalog.workflows if w.key in kept and kept[w.key] != shape(w)]


def record(catalog: WorkflowCatalog = CATALOG) -> list[str]:
    """Add the declared versions not released yet; never change a released one. Returns those added."""
    kept = released()
    if stale := changed(catalog):
        raise SystemExit(f"released versions changed in place (declare a new version): {', '.join(stale)}")
    added = [w.key for w in catalog.workflows if w.key not in kept]
    kept.update({w.key: shape(w) for w in catalog.workflows if w.key not in kept})
    RELEASED.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # The release being made is the next one's release before: it serves every version declared now.
    served = {"release": release.VERSION, "serves": sorted(catalog.keys)}
    PREVIOUS.write_text(json.dumps(served, indent=2) + "\n", encoding="utf-8")
    return added


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orders.released", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record", action="store_true", help="add the versions declared since the last release"
    )
    args = parser.parse_args(argv)
    if args.record:
        added = record()
        print(f"recorded: {', '.join(added) or 'nothing new'}")
        return 0
    stale = changed()
    for name in stale:
        print(f"{name} changed since it was released: declare a new version instead", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
