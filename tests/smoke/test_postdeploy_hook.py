"""The azd postdeploy hook: declared in azure.yaml, valid shell, skipped on request, and it hands the
submission key the Azure CLI reads (the app setting, never a host or function key) to the smoke test. A
fake ``az`` stands in for the Azure CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from smoke.cli import EXIT_API_ERROR
from tests.smoke.fake_api import Canned, serve
from tests.smoke.helpers import HOOK, ROOT, fake_az, run_hook

AZ_CALL = (
    "functionapp config appsettings list -g rg-test -n func-test "
    "--query [?name=='SUBMISSION_KEY'].value | [0] -o tsv"
)


def azd_outputs(url: str, fake_bin: Path) -> dict[str, str]:
    """What azd hands the hook: infra/main.bicep's outputs, with the fake az first on PATH."""
    return {
        "SERVICE_API_URI": url,
        "AZURE_RESOURCE_GROUP": "rg-test",
        "AZURE_FUNCTION_APP_NAME": "func-test",
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
    }


def test_azure_yaml_runs_the_hook_after_deploy_on_every_platform() -> None:
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]
    postdeploy = hooks["postdeploy"]
    assert postdeploy["posix"] == {"shell": "sh", "run": "infra/hooks/postdeploy.sh"}
    assert postdeploy["windows"] == {"shell": "pwsh", "run": "infra/hooks/postdeploy.ps1"}
    for variant in postdeploy.values():
        assert (ROOT / variant["run"]).is_file()
    assert "continueOnError" not in postdeploy, "a failed smoke test fails the deployment"


def test_the_shell_script_is_valid_posix_sh() -> None:
    assert subprocess.run(["sh", "-n", str(HOOK)], check=False).returncode == 0


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_finds_nothing() -> None:
    result = subprocess.run(
        ["shellcheck", "--shell=sh", str(HOOK)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_windows_variant_does_the_same_steps() -> None:
    script = (ROOT / "infra" / "hooks" / "postdeploy.ps1").read_text()
    for needle in (
        "$env:SKIP_SMOKE_TEST -eq 'true'",
        "az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $env:AZURE_FUNCTION_APP_NAME",
        """--query "[?name=='SUBMISSION_KEY'].value | [0]" -o tsv""",
        "$env:ORDERS_SMOKE_KEY = $key",
        "-m smoke --url $env:SERVICE_API_URI",
        "exit $LASTEXITCODE",
    ):
        assert needle in script, needle


def test_skip_smoke_test_exits_0_without_calling_az(tmp_path: Path) -> None:
    calls = fake_az(tmp_path / "bin")
    result = run_hook({**azd_outputs("http://127.0.0.1:9", tmp_path / "bin"), "SKIP_SMOKE_TEST": "true"})
    assert result.returncode == 0, result.stderr
    assert "smoke test skipped" in result.stdout
    assert not calls.exists()


def test_without_the_api_url_it_fails_with_a_reason(tmp_path: Path) -> None:
    calls = fake_az(tmp_path / "bin")
    env = azd_outputs("", tmp_path / "bin")
    result = run_hook(env)
    assert result.returncode == 1
    assert "SERVICE_API_URI is not set" in result.stderr
    assert not calls.exists()


def test_a_failing_az_fails_the_hook(tmp_path: Path) -> None:
    fake_az(tmp_path / "bin", key="", exit_code=1)
    result = run_hook(azd_outputs("http://127.0.0.1:9", tmp_path / "bin"))
    assert result.returncode == 1
    assert "could not read the submission key of func-test" in result.stderr


def test_the_key_from_az_reaches_the_api_and_the_smoke_verdict_is_the_hooks(tmp_path: Path) -> None:
    calls = fake_az(tmp_path / "bin", key="key-from-az")
    routes = {
        ("GET", "/api/health"): Canned(200, {"status": "ok"}),
        ("POST", "/api/orders"): Canned(500, {"error": {"code": "Boom", "message": "x"}}),
    }
    with serve(routes) as api:
        env = {**azd_outputs(api.url, tmp_path / "bin"), "SMOKE_ARGS": "--orders 1 --ready-timeout 1"}
        result = run_hook(env)
        sent = [(method, path, headers.get("x-functions-key")) for method, path, headers in api.requests]
    assert calls.read_text().splitlines() == [AZ_CALL]
    assert sent == [("GET", "/api/health", "key-from-az"), ("POST", "/api/orders", "key-from-az")]
    assert result.returncode == EXIT_API_ERROR, "the smoke test's failure is the hook's"
    assert "key-from-az" not in result.stdout + result.stderr


def test_an_app_without_a_submission_key_fails_the_hook_with_the_way_out(tmp_path: Path) -> None:
    fake_az(tmp_path / "bin", key="")
    result = run_hook(azd_outputs("http://127.0.0.1:9", tmp_path / "bin"))
    assert result.returncode == 1
    assert "func-test has no SUBMISSION_KEY setting: run azd deploy" in result.stderr
