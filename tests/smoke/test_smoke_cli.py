"""orders-smoke against servers that misbehave: each one is exit code 3 with the reason, never a pass."""

from __future__ import annotations

import json

from orders.catalog import CATALOG
from smoke.cli import EXIT_API_ERROR, EXIT_USAGE, KEY_VARIABLE
from tests.smoke.fake_api import Canned, serve
from tests.smoke.helpers import run_smoke

HEALTHY = {("GET", "/api/health"): Canned(200, {"status": "ok"})}
FAST = ("--ready-timeout", "1", "--timeout", "2", "--interval", "0.1")


def test_help_documents_the_exit_codes() -> None:
    result = run_smoke("--help")
    assert result.returncode == 0
    for line in ("0  every order reached Processed", "1  an order ended otherwise", "3  the API misbehaved"):
        assert line in result.stdout


def test_a_bad_command_line_is_a_usage_error() -> None:
    for args in (["--url", "not-a-url"], ["--url", "http://127.0.0.1:1", "--orders", "0"], []):
        result = run_smoke(*args)
        assert result.returncode == EXIT_USAGE, args
        assert "error:" in result.stderr


def test_a_body_that_is_not_json_fails() -> None:
    with serve({("GET", "/"): Canned(200, b"<html>a web page</html>")}) as api:
        result = run_smoke("--url", api.url, *FAST)
    assert result.returncode == EXIT_API_ERROR
    assert "not JSON" in result.stderr and "PASSED" not in result.stdout


def test_an_unhealthy_app_fails_after_the_ready_timeout() -> None:
    with serve({("GET", "/api/health"): Canned(503, {"error": {"code": "Down", "message": "x"}})}) as api:
        result = run_smoke("--url", api.url, *FAST)
        polls = len(api.requests)
    assert result.returncode == EXIT_API_ERROR
    assert "health check failed" in result.stderr and "HTTP 503" in result.stderr
    assert polls > 1, "a host that is still starting is asked again"


def test_a_server_error_on_submit_fails() -> None:
    with serve(
        {**HEALTHY, ("POST", "/api/orders"): Canned(500, {"error": {"code": "Boom", "message": "x"}})}
    ) as api:
        result = run_smoke("--url", api.url, *FAST)
    assert result.returncode == EXIT_API_ERROR
    assert "POST /api/orders: HTTP 500, expected 202" in result.stderr


def test_an_answer_missing_a_field_fails() -> None:
    accepted = {"orderId": "x", "processState": "Pending"}  # no statusUrl
    with serve({**HEALTHY, ("POST", "/api/orders"): Canned(202, accepted)}) as api:
        result = run_smoke("--url", api.url, *FAST)
    assert result.returncode == EXIT_API_ERROR
    assert "statusUrl" in result.stderr


def test_an_answer_about_another_order_fails() -> None:
    with serve(HEALTHY) as api:
        api.routes[("POST", "/api/orders")] = Canned(
            202, {"orderId": "someone-else", "processState": "Pending", "statusUrl": "u"}
        )
        result = run_smoke("--url", api.url, *FAST)
    assert result.returncode == EXIT_API_ERROR
    assert "not 'smoke-" in result.stderr


def test_the_key_is_sent_as_the_functions_key_header_and_never_printed() -> None:
    with serve({("GET", "/"): Canned(200, b"nope")}) as api:
        by_flag = run_smoke("--url", api.url, "--key", "flag-key", *FAST)
        by_env = run_smoke("--url", api.url, *FAST, env={KEY_VARIABLE: "env-key"})
        sent = [headers.get("x-functions-key") for _, _, headers in api.requests]
    assert sent == ["flag-key", "env-key"]
    for result in (by_flag, by_env):
        assert result.returncode == EXIT_API_ERROR
        assert (
            "flag-key" not in result.stdout + result.stderr and "env-key" not in result.stdout + result.stderr
        )


def test_each_order_is_the_default_workflows_first_example() -> None:
    """The body fits whatever input the default workflow declares: its first example, naming no workflow."""
    workflow = CATALOG.current(CATALOG.default)
    assert workflow is not None
    accepted = {"orderId": "x", "processState": "Pending", "statusUrl": "u"}
    with serve({**HEALTHY, ("POST", "/api/orders"): Canned(202, accepted)}) as api:
        result = run_smoke("--url", api.url, "--orders", "2", *FAST)
        bodies = [json.loads(content) for path, content in api.bodies if path == "/api/orders"]
    # The canned answer names another order: the run stops at the first submission, having sent its body.
    assert result.returncode == EXIT_API_ERROR, result.stderr
    assert len(bodies) == 1
    (body,) = bodies
    assert body.pop("orderId").startswith("smoke-")
    assert body == workflow.examples()[0]
