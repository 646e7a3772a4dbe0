"""A service's name is written only where it is declared: every other product file derives it.

Adding a step and its service touches their declaration (``src/orders/services/<service>.py``,
``src/orders/catalog.py``) and nothing else of the product; the generated files are rewritten by
``python -m orders.generate``. Tests and docs may name the example services.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from orders.catalog import SERVICES
from orders.generate import GENERATED

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (".py", ".bicep", ".json", ".yaml", ".yml", ".html", ".js", ".css", ".sh", ".ps1", ".toml")
NOT_PRODUCT = ("tests/", "docs/", "bench/", "infra/contracts/")


# Outside a git checkout (a copy of the repository's files): what git would ignore is left out by name.
IGNORED_DIRECTORIES = {"node_modules", "__pycache__", "local.settings.json"}


def listed_files() -> list[str]:
    """The repository's files: git's tracked and new files, or every file of a copy that is not a checkout."""
    if not (ROOT / ".git").exists():
        return [
            path.relative_to(ROOT).as_posix()
            for path in ROOT.rglob("*")
            if path.is_file()
            and not any(
                part.startswith(".") or part in IGNORED_DIRECTORIES for part in path.relative_to(ROOT).parts
            )
        ]
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return list(filter(None, listed.split("\0")))


def product_files() -> list[str]:
    """The product's files, generated ones excepted."""
    generated = {str(Path(p)) for p in GENERATED}
    return [
        name
        for name in listed_files()
        if name.endswith(PRODUCT)
        and not name.startswith(NOT_PRODUCT)
        and name not in generated
        and (ROOT / name).is_file()
    ]


def test_a_service_is_named_only_in_its_declaration() -> None:
    found: list[str] = []
    for service in SERVICES:
        word = re.compile(rf"(?<![\w-]){re.escape(service.name)}(?![\w-])", re.IGNORECASE)
        allowed = {f"src/orders/services/{service.name}.py", "src/orders/catalog.py"}
        for name in product_files():
            if name in allowed:
                continue
            for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
                if word.search(line):
                    found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "derive these from orders.catalog instead:\n" + "\n".join(found)
