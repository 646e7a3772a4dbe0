"""Regenerate the pinned contracts from local clones of the two public repositories they come from.

- Azure Verified Modules: ``Azure/bicep-registry-modules`` tags every release ``avm/res/<path>/<version>``;
  the compiled ``main.json`` at that tag is what ``br/public:avm/res/<path>:<version>`` resolves to.
- Resource types: ``Azure/bicep-types-az`` publishes
  ``generated/<provider>/<namespace>/<apiVersion>/types.json`` (no release tags: the commit is recorded).

Run it after bumping a module or API version in ``infra/``; it writes every contract ``infra/`` needs and
deletes the ones nothing uses any more.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

from .contracts import ModuleContract, ResourceContract, Source, TypeNode, dump, module_file, resource_file
from .derive import ArmTemplate, ResourceTypes
from .usage import registry_modules, resources_used

AVM_REPOSITORY = "Azure/bicep-registry-modules"
TYPES_REPOSITORY = "Azure/bicep-types-az"


class GitTree:
    """Read-only access to files of a local git clone (a bare repository works too)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise FileNotFoundError(f"git {' '.join(args)} in {self.path}: {result.stderr.strip()}")
        return result.stdout

    def commit(self, ref: str) -> str:
        """The commit a tag or branch names."""
        return self._git("rev-parse", f"{ref}^{{commit}}").strip()

    def read_json(self, ref: str, file: str) -> Any:
        """A JSON file at ``ref``."""
        return json.loads(self._git("show", f"{ref}:{file}"))

    @functools.cache  # noqa: B019 - one listing per clone for the life of a refresh
    def files(self, ref: str, under: str) -> tuple[str, ...]:
        """Every file path under ``under`` at ``ref``."""
        return tuple(self._git("ls-tree", "-r", "--name-only", ref, under).split())


class TypesLibrary:
    """Resource type definitions at one commit of bicep-types-az, located by type and API version."""

    def __init__(self, tree: GitTree, ref: str = "HEAD") -> None:
        self.tree = tree
        self.commit = tree.commit(ref)
        self._loaded: dict[str, list[dict[str, Any]]] = {}

    def locate(self, full_name: str) -> tuple[str, list[dict[str, Any]]]:
        """The ``types.json`` path and content that define ``Type@apiVersion``."""
        type_name, _, api = full_name.partition("@")
        namespace = type_name.split("/")[0].lower()
        suffix = f"/{namespace}/{api}/types.json"
        for path in self.tree.files(self.commit, "generated"):
            if not path.lower().endswith(suffix):
                continue
            if path not in self._loaded:
                self._loaded[path] = self.tree.read_json(self.commit, path)
            if any(
                t.get("$type") == "ResourceType" and t["name"].lower() == full_name.lower()
                for t in self._loaded[path]
            ):
                return path, self._loaded[path]
        raise LookupError(f"{full_name}: no published definition in {TYPES_REPOSITORY} at {self.commit[:12]}")

    def source(self, path: str, covers: str) -> Source:
        return Source(
            repository=TYPES_REPOSITORY, ref=self.commit, commit=self.commit, file=path, covers=covers
        )


def module_contract(avm: GitTree, types: TypesLibrary, module: str, version: str) -> ModuleContract:
    """The contract of ``module`` (e.g. ``avm/res/web/site``) at ``version``."""
    tag = f"{module}/{version}"
    file = f"{module}/main.json"
    try:
        template = avm.read_json(tag, file)
    except FileNotFoundError as error:
        raise LookupError(
            f"{module}:{version}: no release tag {tag} with {file} in {AVM_REPOSITORY}"
        ) from error
    sources = [Source(repository=AVM_REPOSITORY, ref=tag, commit=avm.commit(tag), file=file)]
    readers: dict[str, ResourceTypes] = {}
    derived_table: dict[str, TypeNode] = {}

    def derived(source: str) -> TypeNode:
        full_name, _, path = source.partition("#")
        if full_name not in readers:
            types_file, content = types.locate(full_name)
            readers[full_name] = ResourceTypes(content, full_name)
            sources.append(types.source(types_file, full_name))
        reader = readers[full_name]
        node = reader.derived(reader.resource_body(full_name), path)
        derived_table.update(reader.table)
        return node

    arm = ArmTemplate(template, derived)
    parameters = arm.parameters()
    outputs = arm.outputs()
    for reader in readers.values():
        derived_table.update(reader.table)
    return ModuleContract(
        module=module,
        version=version,
        sources=sources,
        parameters=parameters,
        outputs=outputs,
        types={**arm.table, **derived_table},
    )


def resource_contract(types: TypesLibrary, full_name: str) -> ResourceContract:
    """The contract of a resource type at one API version, ``Type@apiVersion``."""
    path, content = types.locate(full_name)
    reader = ResourceTypes(content, full_name)
    spelled = reader.resource_name(full_name)
    body = reader.node(reader.resource_body(full_name))
    type_name, _, api = spelled.partition("@")
    return ResourceContract(
        resource=type_name,
        api_version=api,
        sources=[types.source(path, spelled)],
        body=body,
        types=reader.table,
    )


def refresh(
    infra: Path, contracts_dir: Path, avm_repo: Path, types_repo: Path, *, prune: bool = True
) -> list[Path]:
    """Write the contract of every registry module and resource type ``infra/`` uses; return the files."""
    avm = GitTree(avm_repo)
    types = TypesLibrary(GitTree(types_repo))
    written: list[Path] = []
    for module, version in sorted(registry_modules(infra)):
        path = module_file(contracts_dir, module, version)
        dump(module_contract(avm, types, module, version), path)
        written.append(path)
    for full_name in sorted(resources_used(infra)):
        type_name, _, api = full_name.partition("@")
        path = resource_file(contracts_dir, type_name, api)
        dump(resource_contract(types, full_name), path)
        written.append(path)
    if prune:
        for stale in sorted(set(contracts_dir.rglob("*.json")) - set(written)):
            stale.unlink()
    return written
