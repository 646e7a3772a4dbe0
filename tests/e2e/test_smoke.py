"""orders-smoke and the postdeploy hook against the real local stack (orders-devhost): orders that reach
Processed pass; an order that is compensated or does not finish in time fails the check."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from smoke.cli import EXIT_NOT_PROCESSED, EXIT_OK
from tests.e2e.conftest import (
    DEFAULT_WORKFLOW,
    LAST_STEP,
    MIDDLE_STEP,
    LocalStack,
    runs,
    start_stack,
    stop_stack,
)
from tests.smoke.helpers import fake_az, run_hook, run_smoke

ORDER_LINE = re.compile(r"^(smoke-[0-9a-f]{16})\s+(\S+)", re.MULTILINE)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One single-worker stack for this module (lighter than the shared two-worker one)."""
    running = start_stack(tmp_path_factory.mktemp("devhost-smoke"), workers=1)
    try:
        yield running
    finally:
        stop_stack(running)


def orders_in(output: str) -> dict[str, str]:
    """Order id -> state, from the summary table."""
    return dict(ORDER_LINE.findall(output))


def test_the_smoke_test_passes_against_the_local_stack(calm: LocalStack) -> None:
    result = run_smoke("--url", calm.devhost.api_url, "--orders", "2", "--timeout", "60", "--interval", "0.2")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "smoke test PASSED: 2/2 orders Processed" in result.stdout
    summary = orders_in(result.stdout)
    assert list(summary.values()) == ["Processed", "Processed"]
    for order_id in summary:  # the orders are real: the API and the ledger know them
        assert calm.order(order_id)["processState"] == "Processed"
        assert set(calm.entries(order_id)) == {step.agent for step in runs(DEFAULT_WORKFLOW, order_id)}


def test_a_compensated_order_fails_the_smoke_test(calm: LocalStack) -> None:
    calm.faults(**{LAST_STEP.agent: {"permanentRate": 1}})
    result = run_smoke("--url", calm.devhost.api_url, "--orders", "1", "--timeout", "60", "--interval", "0.2")
    assert result.returncode == EXIT_NOT_PROCESSED, result.stdout + result.stderr
    assert list(orders_in(result.stdout).values()) == ["Compensated"]
    assert "smoke test FAILED: 0/1 orders Processed" in result.stdout
    assert "last error:" in result.stdout


def test_an_order_that_does_not_finish_in_time_fails_the_smoke_test(calm: LocalStack) -> None:
    calm.faults(**{MIDDLE_STEP.agent: {"latencyMs": 1500}})
    result = run_smoke(
        "--url", calm.devhost.api_url, "--orders", "1", "--timeout", "0.5", "--interval", "0.1"
    )
    assert result.returncode == EXIT_NOT_PROCESSED, result.stdout + result.stderr
    ((order_id, state),) = orders_in(result.stdout).items()
    assert state != "Processed"
    assert f"{order_id}  " in result.stdout and "(timed out)" in result.stdout
    calm.wait_terminal(order_id)  # let it finish before the faults are cleared for the next test


def test_the_postdeploy_hook_runs_the_smoke_test_with_the_key_az_reads(
    calm: LocalStack, tmp_path: Path
) -> None:
    calls = fake_az(tmp_path / "bin", key="key-from-az")
    env = {
        "SERVICE_API_URI": calm.devhost.api_url,
        "AZURE_RESOURCE_GROUP": "rg-local",
        "AZURE_FUNCTION_APP_NAME": "func-local",
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SMOKE_ARGS": "--orders 1 --timeout 60 --interval 0.2",
    }
    result = run_hook(env)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "smoke test PASSED: 1/1 orders Processed" in result.stdout
    assert calls.read_text().splitlines() == [
        "functionapp config appsettings list -g rg-local -n func-local "
        "--query [?name=='SUBMISSION_KEY'].value | [0] -o tsv"
    ]

    skipped = run_hook({**env, "SKIP_SMOKE_TEST": "true"})
    assert skipped.returncode == 0 and "smoke test skipped" in skipped.stdout
    assert len(calls.read_text().splitlines()) == 1, "a skipped hook does not call az"
