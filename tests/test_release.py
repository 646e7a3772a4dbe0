"""The release has one version, answered by the API, installed as the package's, and a CHANGELOG section;
every release a later one runs beside is known by its commit (docs/upgrading.md)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from devhost import releases
from orders import release

ROOT = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def test_one_version_for_the_app_the_package_and_the_changelog() -> None:
    assert SEMVER.match(release.VERSION), release.VERSION
    assert metadata.version("order-processing-sas") == release.VERSION  # pyproject reads orders.release
    sections = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert sections[0] == release.VERSION and release.FIRST_KEPT in sections, sections


def test_every_earlier_release_kept_is_known_by_its_commit() -> None:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    assert release.FIRST_KEPT in releases.RELEASES
    assert all(key(v) < key(release.VERSION) for v in releases.RELEASES)
    assert all(re.fullmatch(r"[0-9a-f]{40}", commit) for commit in releases.RELEASES.values())
