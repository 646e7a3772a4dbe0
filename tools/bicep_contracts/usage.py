"""What a Bicep tree uses: its files, the registry modules (with versions) and resource types it names."""

from __future__ import annotations

import re
from pathlib import Path

from .syntax import BicepFile, parse_file

# br/public:<path>:<version> (the public registry alias) or br:mcr.microsoft.com/bicep/<path>:<version>
_REGISTRY = re.compile(
    r"^br(?:/public:|:mcr\.microsoft\.com/bicep/)(?P<path>[a-z0-9/._-]+):(?P<version>[^:]+)$"
)


def registry_reference(path: str) -> tuple[str, str] | None:
    """(module path, version) of a public registry reference, or None for a local file."""
    match = _REGISTRY.match(path)
    return (match["path"], match["version"]) if match else None


def bicep_files(infra: Path) -> list[BicepFile]:
    """Every Bicep file under ``infra``, parsed."""
    return [parse_file(path) for path in sorted(infra.rglob("*.bicep"))]


def registry_modules(infra: Path) -> set[tuple[str, str]]:
    """Every (module path, version) called from ``infra``."""
    found: set[tuple[str, str]] = set()
    for parsed in bicep_files(infra):
        for module in parsed.modules.values():
            ref = registry_reference(module.path)
            if ref:
                found.add(ref)
    return found


def resources_used(infra: Path) -> set[str]:
    """Every ``Type@apiVersion`` declared as a resource in ``infra``."""
    return {
        f"{resource.type}@{resource.api_version}"
        for parsed in bicep_files(infra)
        for resource in parsed.resources.values()
    }
