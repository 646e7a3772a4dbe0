"""The previous release's engine, adapters and declarations, imported under another name, so that one
simulated run hosts some processes on them beside processes on this release's (``Simulation(beside=...)``,
requirement 8 of issue 53: docs/upgrading.md, "What a release promises").

Both releases name their packages ``engine``, ``adapters`` and ``orders``, and one interpreter holds one
module per name. So the release's sources are read from this repository's history (the commit
``devhost.releases.RELEASES`` names, as ``devhost.releases.checkout`` extracts it, here straight from
``git archive`` into memory) and served by a meta-path finder under a prefix: ``release_1_0_0.engine``,
``release_1_0_0.adapters``, ... Each module's absolute imports of the repository's own packages are
rewritten (by ``ast``) to the prefixed names; relative imports work unchanged, and third-party packages
(pydantic, azure.*) are shared, as they are between two releases' processes on one machine. Loggers keep
their literal names (``engine.scheduler``): both releases' alerts reach the simulation's handler.

A clone without the commit (shallow) cannot load it: :class:`ReleaseUnavailable`, as the devhost's.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import io
import subprocess
import sys
import tarfile
import threading
import types
from collections.abc import Sequence
from typing import Any

from devhost.releases import RELEASES, REPO_ROOT, ReleaseUnavailable

__all__ = ["FIRST_PARTY", "ReleaseUnavailable", "load", "prefix"]

# The repository's own top-level packages under src/ (what a release's modules may import of it).
FIRST_PARTY = frozenset(
    {"engine", "adapters", "orders", "simulators", "simulation", "devhost", "smoke", "servicebus_emulator"}
)
# Loaded from the release: what its processes run (the rest of its src/ is never imported).
_PACKAGES = ("engine", "adapters", "orders")

_lock = threading.Lock()
_installed: dict[str, _ReleaseFinder] = {}


def prefix(version: str) -> str:
    """The top-level name a release's packages live under: ``release_1_0_0`` for 1.0.0."""
    return "release_" + version.replace(".", "_")


class _Rewriter(ast.NodeTransformer):
    """Absolute imports of a first-party package, to the prefixed name."""

    def __init__(self, top: str) -> None:
        self.top = top

    def _first_party(self, name: str) -> bool:
        return name.split(".", 1)[0] in FIRST_PARTY

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level == 0 and node.module and self._first_party(node.module):
            node.module = f"{self.top}.{node.module}"
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST | list[ast.stmt]:
        out: list[ast.stmt] = []
        for alias in node.names:
            if not self._first_party(alias.name):
                out.append(ast.Import(names=[alias]))
            elif alias.asname is not None or "." not in alias.name:
                # ``import engine.x as y`` / ``import engine``: the same binding under the prefixed name.
                bound = alias.asname or alias.name
                out.append(ast.Import(names=[ast.alias(f"{self.top}.{alias.name}", bound)]))
            else:
                # ``import engine.x`` binds ``engine``: import the submodule, then bind the package.
                head = alias.name.split(".", 1)[0]
                out.append(ast.Import(names=[ast.alias(f"{self.top}.{alias.name}")]))
                out.append(ast.ImportFrom(module=self.top, names=[ast.alias(head)], level=0))
        for new in out:
            ast.copy_location(new, node)
        return out


class _ReleaseLoader(importlib.abc.Loader):
    def __init__(self, finder: _ReleaseFinder, path: str | None) -> None:
        self.finder = finder
        self.path = path  # the source's path in the release (None: the synthetic top-level package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        if self.path is None:
            return
        tree = ast.parse(self.finder.sources[self.path], filename=module.__file__ or self.path)
        tree = ast.fix_missing_locations(_Rewriter(self.finder.top).visit(tree))
        exec(compile(tree, module.__file__ or self.path, "exec"), module.__dict__)


class _ReleaseFinder(importlib.abc.MetaPathFinder):
    """Serves ``<top>`` (an empty package) and ``<top>.<package>...`` from the release's sources."""

    def __init__(self, version: str, sources: dict[str, str]) -> None:
        self.version = version
        self.top = prefix(version)
        self.sources = sources  # "engine/scheduler.py" -> its text

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.top:
            spec = importlib.machinery.ModuleSpec(fullname, _ReleaseLoader(self, None), is_package=True)
            spec.submodule_search_locations = []
            return spec
        if not fullname.startswith(self.top + "."):
            return None
        relative = fullname[len(self.top) + 1 :].replace(".", "/")
        origin = f"<release {self.version}>/src/"
        for candidate, package in ((f"{relative}/__init__.py", True), (f"{relative}.py", False)):
            if candidate in self.sources:
                spec = importlib.machinery.ModuleSpec(
                    fullname, _ReleaseLoader(self, candidate), origin=origin + candidate, is_package=package
                )
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = []
                return spec
        return None


def _sources(version: str) -> dict[str, str]:
    """The release's packages' Python sources, from this repository's history."""
    commit = RELEASES[version]
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit, *(f"src/{p}" for p in _PACKAGES)],
            cwd=REPO_ROOT,
            capture_output=True,
            check=False,
        )
    except OSError as exc:  # no git, or no checkout around this file
        raise ReleaseUnavailable(f"release {version} ({commit[:12]}): {exc}") from exc
    if archive.returncode != 0:
        raise ReleaseUnavailable(f"release {version} ({commit[:12]}): {archive.stderr.decode().strip()}")
    found: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                extracted = tar.extractfile(member)
                if extracted is not None:
                    found[member.name.removeprefix("src/")] = extracted.read().decode()
    return found


def load(version: str, module: str) -> Any:
    """Release ``version``'s module ``module`` (``"engine.scheduler"``), imported under its prefix; raises
    :class:`ReleaseUnavailable` if this clone's history lacks the release. ``Any``: the release's own
    types are not this release's (mypy cannot see them)."""
    if version not in RELEASES:
        raise ReleaseUnavailable(f"no release {version} (devhost.releases.RELEASES)")
    with _lock:
        finder = _installed.get(version)
        if finder is None:
            finder = _ReleaseFinder(version, _sources(version))
            sys.meta_path.insert(0, finder)
            _installed[version] = finder
    return importlib.import_module(f"{finder.top}.{module}")
