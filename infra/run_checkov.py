"""Run Checkov on infra/ and fail unless every finding passed or was skipped with a written reason.

    python infra/run_checkov.py [--checkov .venv-checkov/bin/checkov] [--self-test]

Checkov lives in its own virtual environment (its pins clash with the test tools'); this wrapper needs
only the standard library and runs with the project's Python. It runs
``checkov -d infra --framework bicep --external-checks-dir infra/checks -o json --skip-download`` and
fails on:

- any failed check that is not skipped with ``//checkov:skip=<ID>:<reason>`` in the Bicep block, and any
  skip that gives no reason;
- any file Checkov could not parse (Checkov itself exits 0 then: the JSON's ``parsing_errors`` says so);
- custom checks that did not run (``infra/checks`` not loaded), or output that is not Checkov's JSON.

``--self-test`` scans tests/infra/checkov_fixtures instead, where every custom check must fail and the
unparsable file must be reported, so a check that can no longer fail is noticed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
CHECKS = INFRA / "checks"
FIXTURES = ROOT / "tests" / "infra" / "checkov_fixtures"
DEFAULT_CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"

# Custom checks in infra/checks. The graph checks hold the Azure Verified Module calls; the Python
# checks hold plain resources (none today, so they only show up in the self-test).
GRAPH_CHECKS = ("CKV2_ORDERS_1", "CKV2_ORDERS_2", "CKV2_ORDERS_3", "CKV2_ORDERS_4")
RESOURCE_CHECKS = ("CKV_ORDERS_1", "CKV_ORDERS_2", "CKV_ORDERS_3", "CKV_ORDERS_4")
NO_REASON = {"", "no comment provided"}


@dataclass
class Verdict:
    """What one Checkov run found."""

    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    parsing_errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    check_ids: set[str] = field(default_factory=set)
    failed_ids: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.problems


def _where(record: dict[str, Any]) -> str:
    lines = record.get("file_line_range") or ["?", "?"]
    return f"{record.get('file_path', '?')}:{lines[0]}-{lines[1]} {record.get('resource', '?')}"


def reports_of(data: Any) -> list[dict[str, Any]]:
    """Checkov's JSON is one report, a list of reports, or a bare summary when nothing was scanned."""
    items = data if isinstance(data, list) else [data]
    if not all(isinstance(item, dict) for item in items):
        raise ValueError("not Checkov's JSON output")
    return [item for item in items if "results" in item or "summary" in item or "passed" in item]


def evaluate(data: Any, *, require: tuple[str, ...] = GRAPH_CHECKS) -> Verdict:
    """Judge Checkov's JSON output; ``require`` lists check IDs that must have run."""
    verdict = Verdict()
    for report in reports_of(data):
        results = report.get("results", {})
        summary = report.get("summary", report)
        verdict.passed += len(results.get("passed_checks", []))
        for record in results.get("passed_checks", []):
            verdict.check_ids.add(record["check_id"])
        for record in results.get("failed_checks", []):
            verdict.check_ids.add(record["check_id"])
            verdict.failed_ids.add(record["check_id"])
            text = f"{record['check_id']} {record.get('check_name', '')} at {_where(record)}"
            verdict.failed.append(text)
            verdict.problems.append(f"FAILED {text}")
        for record in results.get("skipped_checks", []):
            verdict.check_ids.add(record["check_id"])
            reason = str(record.get("check_result", {}).get("suppress_comment") or "").strip()
            text = f"{record['check_id']} at {_where(record)}: {reason or '(no reason)'}"
            verdict.skipped.append(text)
            if reason.lower() in NO_REASON:
                verdict.problems.append(f"SKIPPED WITHOUT A REASON {text}")
        errors = list(results.get("parsing_errors", []))
        if not errors and summary.get("parsing_errors"):
            errors = [f"{summary['parsing_errors']} file(s)"]
        for error in errors:
            verdict.parsing_errors.append(str(error))
            verdict.problems.append(f"NOT PARSED {error}")
    for check_id in require:
        if check_id not in verdict.check_ids:
            verdict.problems.append(f"NOT RUN {check_id}: are the custom checks in {CHECKS} loaded?")
    return verdict


def run_checkov(checkov: Path, directory: Path) -> tuple[Any, float]:
    """Run Checkov on ``directory`` with the custom checks; return its parsed JSON and the seconds taken."""
    if not checkov.exists():
        raise SystemExit(f"{checkov} not found: `make check-infra` creates the Checkov virtual environment")
    command = [
        str(checkov),
        "--directory",
        str(directory),
        "--framework",
        "bicep",
        "--external-checks-dir",
        str(CHECKS),
        "--output",
        "json",
        "--skip-download",
    ]
    # No network: no guideline download, no version check.
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE"}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    seconds = time.monotonic() - started
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr or done.stdout)[-2000:]
        raise SystemExit(f"Checkov gave no JSON (exit {done.returncode}):\n{tail}") from None
    return data, seconds


def print_verdict(title: str, verdict: Verdict, seconds: float) -> None:
    print(
        f"{title}: {verdict.passed} passed, {len(verdict.failed)} failed, {len(verdict.skipped)} skipped, "
        f"{len(verdict.parsing_errors)} not parsed ({seconds:.1f} s)"
    )
    for line in verdict.skipped:
        print(f"  skipped {line}")
    for line in verdict.problems:
        print(f"  {line}")


def check_infra(checkov: Path) -> bool:
    """The real scan: everything must pass."""
    data, seconds = run_checkov(checkov, INFRA)
    verdict = evaluate(data)
    print_verdict("checkov infra/", verdict, seconds)
    return verdict.ok


def self_test(checkov: Path) -> bool:
    """Every custom check must fail on the insecure fixtures, and the unparsable one must be reported."""
    data, seconds = run_checkov(checkov, FIXTURES)
    verdict = evaluate(data, require=())
    custom = (*GRAPH_CHECKS, *RESOURCE_CHECKS)
    missing = [c for c in custom if c not in verdict.failed_ids]
    unparsed = any("unparsable.bicep" in error for error in verdict.parsing_errors)
    no_reason = any(p.startswith("SKIPPED WITHOUT A REASON") for p in verdict.problems)
    ok = not missing and unparsed and no_reason and not verdict.ok
    print(
        f"checkov self-test on {FIXTURES.relative_to(ROOT)}: custom checks failing "
        f"{len(verdict.failed_ids & set(custom))}/{len(custom)}, parse error reported: "
        f"{unparsed}, reasonless skip caught: {no_reason} ({seconds:.1f} s)"
    )
    if missing:
        print(f"  these custom checks no longer fail on insecure Bicep: {', '.join(missing)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", type=Path, default=DEFAULT_CHECKOV, help="the checkov executable")
    parser.add_argument("--self-test", action="store_true", help="prove the custom checks can fail")
    args = parser.parse_args(argv)
    ok = self_test(args.checkov) if args.self_test else check_infra(args.checkov)
    if not ok:
        print("check-infra FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
