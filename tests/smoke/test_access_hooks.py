"""The scripts that set up who may call the API in Azure, run against stand-ins for ``az`` and ``azd``:
the predeploy hook makes the submission key once (and never passes it as an argument), and the app
registration script creates the Entra ID registration with its two app roles, or only brings an
existing one up to date, and stores its client ID in the azd environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orders.access import APP_ROLES
from tests.smoke.fake_cli import calls, fake_cli
from tests.smoke.helpers import ROOT

HOOKS = ROOT / "infra" / "hooks"
PREDEPLOY = HOOKS / "predeploy.sh"
REGISTRATION = HOOKS / "create-app-registration.sh"
SCRIPTS = (PREDEPLOY, REGISTRATION, HOOKS / "postdeploy.sh")
APP_ID = "11111111-2222-3333-4444-555555555555"
SP_ID = "99999999-8888-7777-6666-555555555555"


def run(script: Path, bin_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AZURE_", "SERVICE_API", "SUBMISSION_KEY", "AUTH_APP", "SITE_UPDATE"))
    }
    return subprocess.run(
        ["sh", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
        cwd=ROOT,
        check=False,
    )


# ---- shape -----------------------------------------------------------------------------------------------
def test_azure_yaml_makes_the_key_before_every_deploy_on_every_platform() -> None:
    predeploy = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]["predeploy"]
    assert predeploy["posix"] == {"shell": "sh", "run": "infra/hooks/predeploy.sh"}
    assert predeploy["windows"] == {"shell": "pwsh", "run": "infra/hooks/predeploy.ps1"}
    assert "continueOnError" not in predeploy


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_scripts_are_valid_posix_sh(script: Path) -> None:
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_finds_nothing(script: Path) -> None:
    result = subprocess.run(
        ["shellcheck", "--shell=sh", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_windows_variants_do_the_same_steps() -> None:
    predeploy = (HOOKS / "predeploy.ps1").read_text()
    for needle in (
        "$env:SUBMISSION_KEY_SETUP -eq 'skip'",
        "az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $app `",
        "$env:CALLBACK_SECRET_SETTINGS",
        "[System.Security.Cryptography.RandomNumberGenerator]::GetBytes(32)",
        'az functionapp config appsettings set -g $env:AZURE_RESOURCE_GROUP -n $app --settings "@$settings"',
        "Remove-Item -Force $settings",
        "az functionapp update-strategy config set --resource-group $env:AZURE_RESOURCE_GROUP `",
        "--name $env:AZURE_FUNCTION_APP_NAME --type $strategy -o none",
        "$strategy -ceq 'Recreate' -or $strategy -ceq 'RollingUpdate'",
    ):
        assert needle in predeploy, needle
    registration = (HOOKS / "create-app-registration.ps1").read_text()
    shell = REGISTRATION.read_text()
    for needle in (
        "az ad app list --display-name $name",
        "az ad app create --display-name $name --sign-in-audience AzureADMyOrg",
        "--enable-id-token-issuance true",
        '--identifier-uris "api://$appId"',
        "az ad sp create --id $appId",
        "--set appRoleAssignmentRequired=true",
        "azd env set AZURE_AUTH_CLIENT_ID $appId",
        "/.auth/login/aad/callback",
    ):
        assert needle in registration, needle
    # The same role ids in both: updating the roles of an existing registration must not change them.
    ids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", shell)
    assert len(set(ids)) == len(APP_ROLES) and all(i in registration for i in ids)
    for role in APP_ROLES:
        assert role in shell and role in registration


# ---- the predeploy hook ------------------------------------------------------------------------------------
AZD_OUTPUTS = {"AZURE_RESOURCE_GROUP": "rg-test", "AZURE_FUNCTION_APP_NAME": "func-test"}
# The keys' tests leave the site update strategy alone (its own tests below).
KEYS_ONLY = {**AZD_OUTPUTS, "SITE_UPDATE_STRATEGY": "skip"}
STRATEGY = "functionapp update-strategy config set --resource-group rg-test --name func-test --type"


@pytest.mark.parametrize(("chosen", "expected"), [(None, "Recreate"), ("RollingUpdate", "RollingUpdate")])
def test_every_deployment_sets_the_site_update_strategy_on_purpose(
    tmp_path: Path, chosen: str | None, expected: str
) -> None:
    az = fake_cli(tmp_path, "az", [("appsettings list", "existing-key", 0), ("update-strategy", "", 0)])
    env = {**AZD_OUTPUTS, "SUBMISSION_KEY_SETUP": "skip"}
    result = run(PREDEPLOY, tmp_path, env if chosen is None else {**env, "SITE_UPDATE_STRATEGY": chosen})
    assert result.returncode == 0, result.stderr
    assert calls(az) == [f"{STRATEGY} {expected} -o none"]
    assert f"the site update strategy of func-test is {expected}" in result.stdout


def test_a_strategy_it_cannot_set_or_does_not_know_fails_the_deployment_and_skip_leaves_it(
    tmp_path: Path,
) -> None:
    az = fake_cli(tmp_path, "az", [("update-strategy", "", 2), ("appsettings list", "existing-key", 0)])
    refused = run(PREDEPLOY, tmp_path, AZD_OUTPUTS)
    assert refused.returncode == 1 and "could not set the site update strategy of func-test" in refused.stderr
    assert calls(az) == [f"{STRATEGY} Recreate -o none"], "no key is made after it"
    unknown = run(PREDEPLOY, tmp_path, {**AZD_OUTPUTS, "SITE_UPDATE_STRATEGY": "recreate"})
    assert unknown.returncode == 1 and "Recreate, RollingUpdate or skip" in unknown.stderr
    assert len(calls(az)) == 1, "refused before any call"
    left = run(PREDEPLOY, tmp_path, KEYS_ONLY)
    assert left.returncode == 0 and not [c for c in calls(az) if "update-strategy" in c][1:]


def test_an_app_with_a_key_keeps_it(tmp_path: Path) -> None:
    az = fake_cli(tmp_path, "az", [("appsettings list", "existing-key", 0)])
    result = run(PREDEPLOY, tmp_path, KEYS_ONLY)
    assert result.returncode == 0, result.stderr
    assert calls(az) == [
        "functionapp config appsettings list -g rg-test -n func-test "
        "--query [?name=='SUBMISSION_KEY'].value | [0] -o tsv"
    ]
    assert "existing-key" not in result.stdout + result.stderr


def test_an_app_without_one_gets_a_random_key_through_a_private_file(tmp_path: Path) -> None:
    # The stand-in copies the settings file it is given, to show what the hook wrote and how.
    copy = tmp_path / "settings-seen.json"
    az = tmp_path / "az"
    fake_cli(tmp_path, "az", [("appsettings list", "", 0), ("appsettings set", "", 0)])
    az.write_text(
        az.read_text().replace(
            "for needle",
            "if 'appsettings set' in arguments:\n"
            "    file = arguments.split('--settings @', 1)[1].split(' ', 1)[0]\n"
            "    import os, stat\n"
            f"    Path({str(copy)!r}).write_text(Path(file).read_text())\n"
            f"    Path({str(copy)!r} + '.mode').write_text(oct(stat.S_IMODE(os.stat(file).st_mode)))\n"
            "for needle",
            1,
        )
    )
    result = run(PREDEPLOY, tmp_path, KEYS_ONLY)
    assert result.returncode == 0, result.stderr
    [_, set_call] = calls(tmp_path / "az-calls.txt")
    assert set_call.startswith("functionapp config appsettings set -g rg-test -n func-test --settings @")
    [setting] = json.loads(copy.read_text())
    assert setting["name"] == "SUBMISSION_KEY" and re.fullmatch(r"[0-9a-f]{64}", setting["value"])
    assert setting["value"] not in set_call, "the key is never an argument"
    assert Path(str(copy) + ".mode").read_text() == "0o600"
    temporary = set_call.split("--settings @", 1)[1].split(" ", 1)[0]
    assert not Path(temporary).exists(), "the settings file is removed"
    assert setting["value"] not in result.stdout + result.stderr
    again = run(PREDEPLOY, tmp_path, KEYS_ONLY)  # a second key each time: drawn at random
    assert again.returncode == 0
    assert json.loads(copy.read_text())[0]["value"] != setting["value"]


def test_each_callback_secret_is_made_once_like_the_key(tmp_path: Path) -> None:
    az = fake_cli(
        tmp_path,
        "az",
        [
            ("name=='SUBMISSION_KEY'", "existing-key", 0),
            ("name=='PAYMENT_CALLBACK_SECRET'", "", 0),
            ("name=='SHOP_CALLBACK_SECRET'", "kept", 0),
            ("appsettings set", "", 0),
        ],
    )
    env = {**KEYS_ONLY, "CALLBACK_SECRET_SETTINGS": "PAYMENT_CALLBACK_SECRET,SHOP_CALLBACK_SECRET"}
    result = run(PREDEPLOY, tmp_path, env)
    assert result.returncode == 0, result.stderr
    made = calls(az)
    assert [c for c in made if "appsettings set" in c] == [made[2]], made  # the missing one only
    assert (
        "has its SHOP_CALLBACK_SECRET" in result.stdout
        and "made the PAYMENT_CALLBACK_SECRET" in result.stdout
    )
    bad = run(PREDEPLOY, tmp_path, {**KEYS_ONLY, "CALLBACK_SECRET_SETTINGS": "x;rm"})
    assert bad.returncode == 1 and "not a setting name" in bad.stderr


def test_skip_and_failures(tmp_path: Path) -> None:
    az = fake_cli(tmp_path, "az", [("appsettings list", "", 3)])
    skipped = run(PREDEPLOY, tmp_path, {**KEYS_ONLY, "SUBMISSION_KEY_SETUP": "skip"})
    assert skipped.returncode == 0 and not calls(az)
    failed = run(PREDEPLOY, tmp_path, KEYS_ONLY)
    assert failed.returncode == 1 and "could not read the app settings of func-test" in failed.stderr
    unprovisioned = run(PREDEPLOY, tmp_path, {"AZURE_RESOURCE_GROUP": "rg-test"})
    assert unprovisioned.returncode == 1 and "AZURE_FUNCTION_APP_NAME is not set" in unprovisioned.stderr


# ---- the app registration script ---------------------------------------------------------------------------
def registration_env() -> dict[str, str]:
    return {"AZURE_ENV_NAME": "dev", "SERVICE_API_URI": "https://func-x.azurewebsites.net"}


def test_a_missing_registration_is_created_with_its_roles(tmp_path: Path) -> None:
    roles_seen = tmp_path / "roles-seen.json"
    az = fake_cli(
        tmp_path,
        "az",
        [
            ("ad app list", "", 0),
            ("ad app create", APP_ID, 0),
            ("ad app update", "", 0),
            ("ad sp list", "", 0),
            ("ad sp create", SP_ID, 0),
            ("ad sp update", "", 0),
        ],
    )
    script = tmp_path / "az"
    script.write_text(
        script.read_text().replace(
            "for needle",
            "if 'ad app create' in arguments:\n"
            "    file = arguments.split('--app-roles @', 1)[1].split(' ', 1)[0]\n"
            f"    Path({str(roles_seen)!r}).write_text(Path(file).read_text())\n"
            "for needle",
            1,
        )
    )
    azd = fake_cli(tmp_path, "azd", [("env set", "", 0)])
    result = run(REGISTRATION, tmp_path, registration_env())
    assert result.returncode == 0, result.stderr
    made = calls(az)
    assert made[0] == "ad app list --display-name orders-dev --query [0].appId -o tsv"
    create = next(c for c in made if c.startswith("ad app create"))
    assert "--display-name orders-dev --sign-in-audience AzureADMyOrg" in create
    assert "--web-redirect-uris https://func-x.azurewebsites.net/.auth/login/aad/callback" in create
    assert "--enable-id-token-issuance true" in create
    assert f"ad app update --id {APP_ID} --identifier-uris api://{APP_ID}" in made
    assert f"ad sp create --id {APP_ID} --query id -o tsv" in made
    assert f"ad sp update --id {APP_ID} --set appRoleAssignmentRequired=true" in made
    assert not [c for c in made if c.startswith("rest")], "nobody is assigned a role unless asked"
    roles = {r["value"]: r for r in json.loads(roles_seen.read_text())}
    assert set(roles) == set(APP_ROLES)
    assert all(r["isEnabled"] and r["allowedMemberTypes"] == ["User"] for r in roles.values())
    assert calls(azd) == [f"env set AZURE_AUTH_CLIENT_ID {APP_ID}"]


def test_an_existing_registration_is_only_brought_up_to_date(tmp_path: Path) -> None:
    az = fake_cli(
        tmp_path,
        "az",
        [
            ("ad app list", APP_ID, 0),
            ("ad app update", "", 0),
            ("ad sp list", SP_ID, 0),
            ("ad sp update", "", 0),
            ("ad signed-in-user show", "me-oid", 0),
            ("rest --method GET", "1", 0),
        ],
    )
    azd = fake_cli(tmp_path, "azd", [("env set", "", 0)])
    result = run(REGISTRATION, tmp_path, registration_env(), "--assign-me")
    assert result.returncode == 0, result.stderr
    made = calls(az)
    assert not [c for c in made if c.startswith(("ad app create", "ad sp create", "rest --method POST"))]
    assert any(c.startswith(f"ad app update --id {APP_ID} --web-redirect-uris") for c in made)
    assert calls(azd) == [f"env set AZURE_AUTH_CLIENT_ID {APP_ID}"]


def test_assigning_the_caller_the_operator_role_when_asked(tmp_path: Path) -> None:
    az = fake_cli(
        tmp_path,
        "az",
        [
            ("ad app list", APP_ID, 0),
            ("ad sp list", SP_ID, 0),
            ("ad signed-in-user show", "me-oid", 0),
            ("rest --method GET", "0", 0),
            ("", "", 0),
        ],
    )
    fake_cli(tmp_path, "azd", [("env set", "", 0)])
    result = run(REGISTRATION, tmp_path, registration_env(), "--assign-me")
    assert result.returncode == 0, result.stderr
    [post] = [c for c in calls(az) if c.startswith("rest --method POST")]
    assert f"/servicePrincipals/{SP_ID}/appRoleAssignedTo" in post
    operator_id = re.search(r"OPERATOR_ROLE_ID=(\S+)", REGISTRATION.read_text())
    assert operator_id is not None
    assert json.loads(post.split("--body ", 1)[1].rsplit(" -o none", 1)[0]) == {
        "principalId": "me-oid",
        "resourceId": SP_ID,
        "appRoleId": operator_id.group(1),
    }


def test_it_needs_the_apps_address_and_refuses_unknown_arguments(tmp_path: Path) -> None:
    fake_cli(tmp_path, "az", [("", "", 0)])
    fake_cli(tmp_path, "azd", [("env get-value", "", 1)])
    early = run(REGISTRATION, tmp_path, {"AZURE_ENV_NAME": "dev"})
    assert early.returncode == 1 and "run azd up first" in early.stderr
    wrong = run(REGISTRATION, tmp_path, registration_env(), "--everyone")
    assert wrong.returncode == 1 and "unknown argument --everyone" in wrong.stderr
