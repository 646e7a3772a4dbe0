"""The layers of docs/architecture.md, as imports: the engine never imports the declaration of workflows
(``orders``) nor anything that carries it, and the adapters only the engine. Another team reuses both by
writing only its own declaration; and the walk-through (tests/e2e/test_customizing.py) need not run the
engine's tests again on a copy with a workflow of its own, since they cannot read it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TOOLS = ROOT / "tools"
# src/ is what is deployed (function_app.py's packages); tools/ the local runtime and the tools.
DEPLOYED = {"engine", "adapters", "orders", "simulators"}
WORKSHOP = {"devhost", "simulation", "servicebus_emulator", "bicep_contracts", "smoke"}
OURS = DEPLOYED | WORKSHOP
ALLOWED = {"engine": {"engine"}, "adapters": {"engine", "adapters"}}


def folder(package: str) -> Path:
    return (SRC if package in DEPLOYED else TOOLS) / package


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
        for path in sorted(folder(layer).rglob("*.py"))
        if (found := imported(path)) - ALLOWED[layer]
    }
    assert wrong == {}, f"{layer} imports what it must not: {wrong}"


# The engine's face (src/engine/__init__.py): the app, the adapters and the local runtime import the engine
# from there, by the names it lists. The workshop that plants bugs in the engine's parts (the simulation,
# the benchmarks) and the tests may reach into its modules.
FACE_HELD = ("orders", "adapters", "devhost", "simulators", "servicebus_emulator")


def _outside_uses() -> dict[str, list[str]]:
    """Each module held to the face, with what it takes from the engine other than through it."""
    import engine

    paths = [path for layer in FACE_HELD for path in sorted(folder(layer).rglob("*.py"))]
    found: dict[str, list[str]] = {}
    for path in [*paths, ROOT / "function_app.py"]:
        wrong: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wrong += [alias.name for alias in node.names if alias.name.split(".")[0] == "engine"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.startswith("engine."):
                    wrong.append(node.module)
                elif node.module == "engine":
                    wrong += [f"engine.{a.name}" for a in node.names if a.name not in engine.__all__]
        if wrong:
            found[str(path.relative_to(ROOT))] = wrong
    return found


def test_outside_code_uses_the_engine_through_its_face_only() -> None:
    assert _outside_uses() == {}, (
        "import these from engine, and list them in engine.__all__ if they are public"
    )


def test_the_face_names_what_it_holds_and_nothing_it_does_not() -> None:
    import engine

    assert len(set(engine.__all__)) == len(engine.__all__)
    missing = [name for name in engine.__all__ if not hasattr(engine, name)]
    assert missing == []
    # Every name listed is used outside the engine: the face is no wider than what is used.
    used: set[str] = set()
    for path in [
        *(p for layer in OURS - {"engine"} for p in folder(layer).rglob("*.py")),
        ROOT / "function_app.py",
    ]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "engine":
                used |= {alias.name for alias in node.names}
    assert sorted(set(engine.__all__) - used) == []


def _modules(base: Path) -> dict[str, Path]:
    """The modules under ``base`` by their dotted name below it (``scheduler``; a package by its own name,
    ``transitions``, its modules by theirs, ``transitions.forward``); ``base``'s own __init__ is ""."""
    modules: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of ``graph`` a depth-first walk meets: a module met again while still on the
    path closes one."""
    state: dict[str, int] = {}
    circles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                circles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return circles


def _imports_within_the_engine(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The engine's modules that module ``name`` imports, by their dotted names: ``from .x import y`` and
    ``from . import x``, ``from ..x import y`` in a package. Importing a module of a package runs the
    package's ``__init__`` first: a module outside the package depends on that too. Fails on an import
    of the face (engine/__init__.py)."""
    where = f"engine/{path.relative_to(SRC / 'engine')}"
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "engine":
            raise AssertionError(f"{where} imports the face")
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        assert node.level - 1 <= len(package), f"{where} imports from above the engine"
        base = package[: len(package) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
        assert source in modules, f"{where} imports from {source!r}, no module of the engine"
        for alias in node.names:
            module = f"{source}.{alias.name}" if source else alias.name
            if module in modules:
                deps.add(module)  # a module: from . import calls
            elif source:
                deps.add(source)  # a name of a module, or of a package's __init__
            else:
                raise AssertionError(f"{where} imports the face: {alias.name}")
    for dep in list(deps):
        parts = dep.split(".")
        outer = {".".join(parts[:i]) for i in range(1, len(parts))}
        deps |= {pkg for pkg in outer if pkg != name and not name.startswith(f"{pkg}.")}
    return deps


def test_the_engine_s_modules_never_import_its_face_nor_form_a_circle() -> None:
    """Every module of the engine, those of its packages (engine/transitions/) too."""
    modules = _modules(SRC / "engine")
    graph = {name: _imports_within_the_engine(name, path, modules) for name, path in modules.items() if name}
    circles = _circles(graph)
    assert circles == [], f"import circles among the engine's modules: {circles}"


def test_src_holds_what_is_deployed_and_nothing_deployed_imports_the_workshop() -> None:
    """The layout shows the architecture: src/ is the deployed app's packages (.funcignore keeps tools/
    out), and none of them, nor function_app.py, imports a package of tools/."""
    assert {path.name for path in SRC.iterdir() if (path / "__init__.py").is_file()} == DEPLOYED
    assert {path.name for path in TOOLS.iterdir() if (path / "__init__.py").is_file()} == WORKSHOP
    deployed = [p for package in sorted(DEPLOYED) for p in sorted(folder(package).rglob("*.py"))]
    wrong = {
        str(path.relative_to(ROOT)): sorted(found & WORKSHOP)
        for path in [*deployed, ROOT / "function_app.py"]
        if (found := imported(path)) & WORKSHOP
    }
    assert wrong == {}, f"deployed code imports the local runtime or the tools: {wrong}"


def _runtime_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """The imports a module runs: at its top, in its functions (a deferred import closes a circle all the
    same, only later), not those under ``if TYPE_CHECKING:`` (annotations, never run)."""
    found: list[ast.ImportFrom | ast.Import] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    walk_one(other)
                continue
            walk_one(child)

    def walk_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        walk(node)

    walk(tree)
    return found


def _package_graph(base: Path) -> dict[str, set[str]]:
    """The modules of the package at ``base`` (dotted under it: ``oracle.core``; a package by its own
    name), each with the modules of it that it imports. Importing a module runs its packages' ``__init__``
    first: an import of ``oracle.core`` from outside the package also depends on ``oracle``."""
    top = base.name
    names = _modules(base)
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        own = {".".join(name.split(".")[:i]) for i in range(len(name.split(".")) + 1)}
        deps: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith(f"{top}.")]
                targets = [t.removeprefix(f"{top}.") for t in targets]
            elif node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [module, *(f"{module}.{a.name}".strip(".") for a in node.names)]
            elif node.module == top or (node.module or "").startswith(f"{top}."):
                module = (node.module or "").removeprefix(top).strip(".")
                targets = [module, *(f"{module}.{a.name}".strip(".") for a in node.names)]
            else:
                continue
            for target in targets:
                pieces = target.split(".")
                for i in range(1, len(pieces) + 1):
                    dep = ".".join(pieces[:i])
                    if dep in names and dep not in own:
                        deps.add(dep)
        graph[name] = deps
    return graph


@pytest.mark.parametrize(
    "base",
    [*(SRC / package for package in sorted(DEPLOYED - {"engine"})), *(TOOLS / p for p in sorted(WORKSHOP))],
    ids=lambda base: f"{base.parent.name}/{base.name}",
)
def test_no_package_s_modules_form_an_import_circle(base: Path) -> None:
    """No module of a package imports one that imports it back, directly or through others (the engine's
    own test above also holds it to its face): the simulation's oracle, actors, checks and run, the
    adapters' table store units, the app's routes and handlers each build on what is below them."""
    circles = _circles(_package_graph(base))
    assert circles == [], f"import circles among {base.name}'s modules: {circles}"
