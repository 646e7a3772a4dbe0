"""The layers of docs/architecture.md, as imports: the engine never imports the declaration of workflows
(``orders``) nor anything that carries it, and the adapters only the engine. Another team reuses both by
writing only its own declaration; and the walk-through (tests/e2e/test_customizing.py) need not run the
engine's tests again on a copy with a workflow of its own, since they cannot read it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
OURS = {"engine", "adapters", "orders", "devhost", "simulators", "simulation", "servicebus_emulator"}
ALLOWED = {"engine": {"engine"}, "adapters": {"engine", "adapters"}}


def imported(path: Path) -> set[str]:
    """The top-level packages of this repository that a module imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & (OURS | {"function_app"})


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_those_below_it(layer: str) -> None:
    wrong = {
        str(path.relative_to(SRC)): sorted(found - ALLOWED[layer])
        for path in sorted((SRC / layer).rglob("*.py"))
        if (found := imported(path)) - ALLOWED[layer]
    }
    assert wrong == {}, f"{layer} imports what it must not: {wrong}"
