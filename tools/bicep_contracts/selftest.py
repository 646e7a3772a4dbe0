"""The check's own test: fixtures with deliberate mistakes, each marked where it must be reported.

A fixture line ending in ``// expect: <text>`` must get a finding on that line whose message contains
``<text>``; a finding on any other line is a false alarm. Both fail the self-test, so a check that stops
catching a kind of mistake, or starts crying wolf, is noticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .check import Contracts, FileChecker, Finding
from .syntax import parse_file

_EXPECT = re.compile(r"//\s*expect:\s*(?P<text>.+?)\s*$")


@dataclass(frozen=True)
class Expectation:
    file: Path
    line: int
    text: str


def expectations(path: Path) -> list[Expectation]:
    """The ``// expect:`` marks of one fixture."""
    found: list[Expectation] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            found.append(Expectation(path, number, match["text"]))
    return found


def run_fixture(path: Path, contracts: Contracts) -> tuple[list[Expectation], list[Finding]]:
    """Check one fixture: (expectations no finding met, findings no expectation asked for)."""
    parsed = parse_file(path)
    locals_ = {p.resolve(): parse_file(p) for p in sorted(path.parent.rglob("*.bicep")) if p != path}
    locals_[path.resolve()] = parsed
    findings = FileChecker(parsed, contracts, locals_).run()
    expected = expectations(path)
    missed = [e for e in expected if not any(f.line == e.line and e.text in f.message for f in findings)]
    lines = {e.line for e in expected}
    unexpected = [f for f in findings if f.line not in lines]
    return missed, unexpected


def self_test(fixtures: Path, contracts_dir: Path) -> list[str]:
    """Every problem with the fixtures; empty when the check reports all of the marks and nothing else."""
    contracts = Contracts(contracts_dir)
    problems: list[str] = []
    paths = sorted(fixtures.glob("*.bicep"))
    if not paths:
        return [f"no fixtures in {fixtures}"]
    for path in paths:
        if not expectations(path):
            problems.append(f"{path}: has no `// expect:` mark")
        missed, unexpected = run_fixture(path, contracts)
        problems.extend(f"{e.file}:{e.line}: not reported: {e.text}" for e in missed)
        problems.extend(f"{f}  (false alarm)" for f in unexpected)
    return problems
