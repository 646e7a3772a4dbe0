"""The Checkov wrapper's verdicts, on Checkov-shaped JSON (Checkov itself runs in `make check-infra`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_checkov", ROOT / "infra" / "run_checkov.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_checkov"] = module
    spec.loader.exec_module(module)
    return module


run_checkov = _load()


def record(check_id: str, **result: Any) -> dict[str, Any]:
    return {
        "check_id": check_id,
        "check_name": f"name of {check_id}",
        "check_result": result or {"result": "PASSED"},
        "file_path": "/app/x.bicep",
        "file_line_range": [1, 9],
        "resource": "bicep_registry_alias.x",
    }


def report(passed=(), failed=(), skipped=(), parsing_errors=()) -> dict[str, Any]:
    return {
        "check_type": "bicep",
        "results": {
            "passed_checks": list(passed),
            "failed_checks": list(failed),
            "skipped_checks": list(skipped),
            "parsing_errors": list(parsing_errors),
        },
        "summary": {"parsing_errors": len(parsing_errors)},
    }


CUSTOM = [record(c) for c in run_checkov.GRAPH_CHECKS]


def test_all_passed_is_ok() -> None:
    assert run_checkov.evaluate(report(passed=CUSTOM)).ok


def test_a_failed_check_fails() -> None:
    verdict = run_checkov.evaluate(report(passed=CUSTOM, failed=[record("CKV_AZURE_35", result="FAILED")]))
    assert not verdict.ok
    assert verdict.problems == [
        "FAILED CKV_AZURE_35 name of CKV_AZURE_35 at /app/x.bicep:1-9 bicep_registry_alias.x"
    ]


def test_a_parse_error_fails_even_though_checkov_exits_0() -> None:
    verdict = run_checkov.evaluate(report(passed=CUSTOM, parsing_errors=["/infra/app/broken.bicep"]))
    assert verdict.problems == ["NOT PARSED /infra/app/broken.bicep"]


def test_a_summary_counting_parse_errors_fails_too() -> None:
    data = [report(passed=CUSTOM), {"passed": 0, "failed": 0, "parsing_errors": 1}]
    assert not run_checkov.evaluate(data).ok


@pytest.mark.parametrize(
    "reason, ok", [("shared keys are off elsewhere", True), ("No comment provided", False)]
)
def test_a_skip_needs_a_written_reason(reason: str, ok: bool) -> None:
    skipped = record("CKV_AZURE_44", result="SKIPPED", suppress_comment=reason)
    assert run_checkov.evaluate(report(passed=CUSTOM, skipped=[skipped])).ok is ok


def test_custom_checks_that_did_not_run_fail() -> None:
    verdict = run_checkov.evaluate({"passed": 0, "failed": 0, "parsing_errors": 0})
    assert [p.split(":")[0] for p in verdict.problems] == [f"NOT RUN {c}" for c in run_checkov.GRAPH_CHECKS]


def test_output_that_is_not_checkov_json_is_refused() -> None:
    with pytest.raises(ValueError):
        run_checkov.evaluate(["not a report"])
