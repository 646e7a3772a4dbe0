"""The input encryption key in Azure: a Key Vault (app/keyvault.bicep) that authorizes by Azure RBAC only and
cannot be purged, the app's identity reading it (Key Vault Secrets User) and the deploying principal making
the key (Key Vault Secrets Officer, both in app/rbac.bicep), the app settings INPUT_ENCRYPTION_KEY and
INPUT_ENCRYPTION_PREVIOUS_KEYS as Key Vault references resolved with the user-assigned identity
(app/function-app.bicep), and the postprovision hook that makes the secret once, in the form the app reads:
"<key id>:<base64 of 32 random bytes>", the key id 1-16 of [a-z0-9-].

The Bicep is evaluated offline (tests/infra/bicep_eval.py); the hook runs against a stand-in ``az``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bicep_contracts.check import check_tree
from bicep_contracts.syntax import Access, Cond, Expr, Interp, Lit, Obj, Ref, body_object
from tests.infra.bicep_eval import Evaluator

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
APP = INFRA / "app"
HOOKS = INFRA / "hooks"
HOOK = HOOKS / "postprovision.sh"
KEY_VAULT_SECRETS_USER = "4633458b-17de-408a-b874-0445c86b69e6"
KEY_VAULT_SECRETS_OFFICER = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
VAULT = "Microsoft.KeyVault/vaults"
# The settings contract (orders.settings): "<key id>:<base64 of 32 random bytes>".
KEY_ID = re.compile(r"[a-z0-9-]{1,16}")
IDENTITY_ID = (
    "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id"
)


# ---- the deployment in small -------------------------------------------------------------------------------
def main(**params: Any) -> Evaluator:
    return Evaluator(
        INFRA / "main.bicep",
        {"environmentName": "dev", "location": "westeurope", "simulatorsKey": "k", **params},
    )


def key_vault_outputs() -> dict[str, Any]:
    """The outputs of app/keyvault.bicep that are its own (the names of its secrets), evaluated."""
    evaluator = Evaluator(APP / "keyvault.bicep", {"name": "kv-x", "location": "westeurope", "tags": {}})
    outputs = evaluator.file.outputs
    return {name: evaluator.eval(outputs[name].value) for name in ("inputKeyName", "previousInputKeysName")}


def module_params(evaluator: Evaluator, module: str) -> Obj:
    body = body_object(evaluator.file.modules[module].body)
    params = body.get("params") if body is not None else None
    assert isinstance(params, Obj), f"module {module} has no params"
    return params


def module_expr(evaluator: Evaluator, module: str, name: str) -> Expr:
    value = module_params(evaluator, module).get(name)
    assert value is not None, f"module {module} gets no {name}"
    return value


def module_param(evaluator: Evaluator, module: str, name: str) -> Any:
    """What main.bicep passes to a module's parameter, with the key vault module's outputs in scope."""
    outputs = {**key_vault_outputs(), "name": "kv-x"}
    return evaluator.eval(module_expr(evaluator, module, name), {"keyVault": {"outputs": outputs}})


def function_app(previous_keys: bool = False) -> Evaluator:
    deployment = main(inputEncryptionPreviousKeys=previous_keys)
    return Evaluator(
        APP / "function-app.bicep",
        {
            "name": "func-x",
            "serviceUrls": "",
            "simulatorsKey": "k",
            "authClientId": "",
            "identityResourceId": IDENTITY_ID,
            **{
                name: module_param(deployment, "api", name)
                for name in ("keyVaultName", "inputKeyName", "previousInputKeysName")
            },
        },
    )


def site_params(evaluator: Evaluator) -> dict[str, Any]:
    return evaluator.eval(module_params(evaluator, "site"))


def app_settings(previous_keys: bool = False) -> dict[str, Any]:
    (config,) = [c for c in site_params(function_app(previous_keys))["configs"] if c["name"] == "appsettings"]
    return dict(config["properties"])


def vault_params() -> dict[str, Any]:
    evaluator = Evaluator(APP / "keyvault.bicep", {"name": "kv-x", "location": "westeurope", "tags": {}})
    return evaluator.eval(module_params(evaluator, "vault"))


def role_assignments(user: str = "me") -> list[dict[str, Any]]:
    evaluator = Evaluator(
        APP / "rbac.bicep", {"keyVaultName": "kv-x", "appPrincipalId": "app", "userPrincipalId": user}
    )
    found: list[dict[str, Any]] = []
    for symbol, resource in evaluator.file.resources.items():
        if resource.type == "Microsoft.Authorization/roleAssignments":
            value = evaluator.resource(symbol)
            found += value if isinstance(value, list) else [value] if value else []
    return found


# ---- the vault ---------------------------------------------------------------------------------------------
def test_main_creates_the_vault_with_a_unique_name_in_the_resource_group() -> None:
    deployment = main()
    assert deployment.file.modules["keyVault"].path == "app/keyvault.bicep"
    name = module_expr(deployment, "keyVault", "name")
    # uniqueString() is 13 lower-case letters and digits: "kv-" and it make 16 characters, within the
    # vault's rule (3-24 letters, digits and hyphens, a letter first), and the same at every deployment.
    assert isinstance(name, Interp) and name.text == "kv-${resourceToken}"
    assert "uniqueString(subscription().id, environmentName, location)" in (INFRA / "main.bicep").read_text()


def test_the_vault_authorizes_by_azure_rbac_only_and_cannot_be_purged() -> None:
    params = vault_params()
    assert params["enableRbacAuthorization"] is True
    assert "accessPolicies" not in params
    assert params["enableSoftDelete"] is True and params["enablePurgeProtection"] is True
    assert 7 <= params["softDeleteRetentionInDays"] <= 90
    assert params["sku"] == "standard"
    assert not (
        params["enableVaultForDeployment"]
        or params["enableVaultForTemplateDeployment"]
        or params["enableVaultForDiskEncryption"]
    )


def test_bicep_makes_no_secret_and_no_role_assignment_in_the_vault_module() -> None:
    # A secret's value written in Bicep would be drawn anew at each deployment (the hook makes it once);
    # role assignments are in rbac.bicep only.
    params = vault_params()
    assert "secrets" not in params and "keys" not in params and "roleAssignments" not in params


def test_the_vault_is_reached_as_the_storage_account_is() -> None:
    # Flex Consumption without a virtual network resolves the reference over the public endpoint.
    storage = Evaluator(
        APP / "storage.bicep",
        {
            "name": "st",
            "location": "l",
            "tags": {},
            "deploymentContainerName": "c",
            "stateTableName": "orders",
        },
    )
    account = storage.eval(module_params(storage, "account"))
    params = vault_params()
    assert params["publicNetworkAccess"] == account["publicNetworkAccess"] == "Enabled"
    assert params["networkAcls"] == account["networkAcls"]


# ---- who may read it ---------------------------------------------------------------------------------------
def test_the_apps_identity_reads_the_secrets_and_the_deploying_user_manages_them() -> None:
    on_vault = [a for a in role_assignments() if a["scope"]["type"] == VAULT]
    assert {
        (a["properties"]["principalId"], a["properties"]["roleDefinitionId"].rsplit("/", 1)[1])
        for a in on_vault
    } == {
        ("app", KEY_VAULT_SECRETS_USER),
        ("me", KEY_VAULT_SECRETS_OFFICER),
    }
    assert {a["scope"]["name"] for a in on_vault} == {"kv-x"}
    # Without a deploying user, the app's read alone.
    alone = [a for a in role_assignments(user="") if a["scope"]["type"] == VAULT]
    assert [a["properties"]["principalId"] for a in alone] == ["app"]


def test_main_hands_rbac_the_vault_it_creates() -> None:
    expr = module_expr(main(), "rbac", "keyVaultName")
    assert isinstance(expr, Access) and expr.base == Ref("keyVault", expr.line)
    assert expr.path == ("outputs", "name")


# ---- the app settings --------------------------------------------------------------------------------------
def test_the_key_is_a_key_vault_reference_resolved_with_the_user_assigned_identity() -> None:
    names = key_vault_outputs()
    settings = app_settings()
    assert settings["INPUT_ENCRYPTION_KEY"] == (
        f"@Microsoft.KeyVault(VaultName=kv-x;SecretName={names['inputKeyName']})"
    )
    params = site_params(function_app())
    # The site has the user-assigned identity only: without this the platform would try a system one.
    assert params["keyVaultAccessIdentityResourceId"] == IDENTITY_ID
    assert params["managedIdentities"] == {"userAssignedResourceIds": [IDENTITY_ID]}


def test_the_previous_keys_are_a_reference_only_once_the_parameter_says_their_secret_exists() -> None:
    assert app_settings()["INPUT_ENCRYPTION_PREVIOUS_KEYS"] == ""
    names = key_vault_outputs()
    assert app_settings(previous_keys=True)["INPUT_ENCRYPTION_PREVIOUS_KEYS"] == (
        f"@Microsoft.KeyVault(VaultName=kv-x;SecretName={names['previousInputKeysName']})"
    )
    assert names["inputKeyName"] != names["previousInputKeysName"]
    fed = json.loads((INFRA / "main.parameters.json").read_text())["parameters"][
        "inputEncryptionPreviousKeys"
    ]
    assert fed == {"value": "${INPUT_ENCRYPTION_PREVIOUS_KEYS_SECRET=false}"}
    default = main().file.params["inputEncryptionPreviousKeys"].default
    assert isinstance(default, Lit) and default.value is False


def test_no_key_value_is_ever_in_the_bicep() -> None:
    for value in (
        app_settings()["INPUT_ENCRYPTION_KEY"],
        app_settings(True)["INPUT_ENCRYPTION_PREVIOUS_KEYS"],
    ):
        assert value.startswith("@Microsoft.KeyVault(") and value.endswith(")")
    assert "secrets:" not in (APP / "keyvault.bicep").read_text()


def test_main_outputs_the_vault_and_the_secrets_name_for_the_hook() -> None:
    outputs = main().file.outputs
    for name, path in (
        ("AZURE_KEY_VAULT_NAME", ("outputs", "name")),
        ("INPUT_ENCRYPTION_KEY_SECRET_NAME", ("outputs", "inputKeyName")),
    ):
        value = outputs[name].value
        assert outputs[name].type == "string"
        assert isinstance(value, Access) and value.base == Ref("keyVault", value.line) and value.path == path
    previous = module_expr(main(), "api", "previousInputKeysName")
    assert isinstance(previous, Cond) and previous.condition == Ref(
        "inputEncryptionPreviousKeys", previous.line
    )


def test_the_pipeline_passes_the_variable_on() -> None:
    # Left out, the pipeline's azd provision would set INPUT_ENCRYPTION_PREVIOUS_KEYS back to empty, and
    # what the previous keys sealed could no longer be opened.
    pipeline = yaml.safe_load((ROOT / ".github" / "workflows" / "azure-dev.yml").read_text())
    (job,) = pipeline["jobs"].values()
    name = "INPUT_ENCRYPTION_PREVIOUS_KEYS_SECRET"
    assert job["env"][name] == f"${{{{ vars.{name} }}}}"


# ---- the contract check sees the vault module --------------------------------------------------------------
def test_a_mistake_in_the_vault_module_call_is_caught(tmp_path: Path) -> None:
    copy = Path(
        shutil.copytree(INFRA, tmp_path / "infra", ignore=shutil.ignore_patterns("contracts", "checks"))
    )
    vault = copy / "app" / "keyvault.bicep"
    text = vault.read_text()
    assert text.count("    enablePurgeProtection: true\n") == 1 and text.count("    sku: 'standard'\n") == 1
    vault.write_text(
        text.replace("    enablePurgeProtection: true\n", "    enablePurgeprotection: true\n").replace(
            "    sku: 'standard'\n", "    sku: 'Standard'\n"
        )
    )
    messages = [f.message for f in check_tree(copy, INFRA / "contracts")]
    assert any(
        "'enablePurgeprotection': the contract spells it 'enablePurgeProtection'" in m for m in messages
    )
    assert any("'Standard'" in m for m in messages), messages


# ---- the postprovision hook --------------------------------------------------------------------------------
# A stand-in for az: records each call's arguments; answers from a list of [substring, output, exit code,
# times] (the first match that has times left wins; times null: always); keeps the file `secret set` got.
FAKE_AZ = """#!{python}
import json, shutil, sys
from pathlib import Path
here = Path(__file__).resolve().parent
arguments = " ".join(sys.argv[1:])
with (here / "az-calls.txt").open("a") as calls:
    calls.write(arguments + "\\n")
if "secret set" in arguments:
    given = sys.argv[sys.argv.index("--file") + 1]
    shutil.copyfile(given, here / "az-secret-file")
    (here / "az-secret-path").write_text(given)
answers = json.loads((here / "az-answers.json").read_text())
for answer in answers:
    needle, output, code, times = answer
    if needle in arguments and times != 0:
        if times is not None:
            answer[3] = times - 1
            (here / "az-answers.json").write_text(json.dumps(answers))
        if output:
            print(output)
        sys.exit(code)
"""
FAKE_SLEEP = """#!/bin/sh
echo "$@" >>"$(dirname "$0")/sleep-calls.txt"
"""
AZD_OUTPUTS = {
    "AZURE_KEY_VAULT_NAME": "kv-test",
    "INPUT_ENCRYPTION_KEY_SECRET_NAME": "input-encryption-key",
    "AZURE_RESOURCE_GROUP": "rg-test",
    "AZURE_FUNCTION_APP_NAME": "func-test",
}
APP_ID = "/subscriptions/s/resourceGroups/rg-test/providers/Microsoft.Web/sites/func-test"
LIST = "keyvault secret list --vault-name kv-test --query length([?name=='input-encryption-key']) -o tsv"


def stand_ins(directory: Path, answers: list[list[Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "az-answers.json").write_text(json.dumps(answers))
    for name, text in (("az", FAKE_AZ.format(python=sys.executable)), ("sleep", FAKE_SLEEP)):
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return directory


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def postprovision(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "INPUT_ENCRYPTION"))}
    return subprocess.run(
        ["sh", str(HOOK)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "PATH": f"{bin_dir}:{os.environ['PATH']}", **AZD_OUTPUTS, **env},
        cwd=ROOT,
        check=False,
    )


MAKES_IT: list[list[Any]] = [
    ["secret list", "0", 0, None],
    ["secret set", "", 0, None],
    ["functionapp show", APP_ID, 0, None],
    ["rest --method post", "", 0, None],
]


def test_azure_yaml_runs_the_hook_after_every_provision_on_every_platform() -> None:
    hook = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]["postprovision"]
    assert hook["posix"] == {"shell": "sh", "run": "infra/hooks/postprovision.sh"}
    assert hook["windows"] == {"shell": "pwsh", "run": "infra/hooks/postprovision.ps1"}
    assert "continueOnError" not in hook, "an app without its key must not look deployed"
    for variant in hook.values():
        assert (ROOT / variant["run"]).is_file()


def test_the_hook_is_valid_posix_sh() -> None:
    assert subprocess.run(["sh", "-n", str(HOOK)], check=False).returncode == 0


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_finds_nothing() -> None:
    result = subprocess.run(
        ["shellcheck", "--shell=sh", str(HOOK)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_hook_makes_the_key_once_in_the_form_the_app_reads(tmp_path: Path) -> None:
    result = postprovision(stand_ins(tmp_path, MAKES_IT))
    assert result.returncode == 0, result.stderr
    made = lines(tmp_path / "az-calls.txt")
    assert made[0] == LIST
    (set_call,) = [c for c in made if "secret set" in c]
    assert set_call.startswith("keyvault secret set --vault-name kv-test --name input-encryption-key --file ")
    assert "--value" not in set_call
    value = (tmp_path / "az-secret-file").read_text()
    key_id, colon, encoded = value.partition(":")
    assert colon and KEY_ID.fullmatch(key_id) and re.fullmatch(r"k\d{8}", key_id), value[:12]
    assert len(base64.b64decode(encoded, validate=True)) == 32
    assert value == value.strip(), "no newline in the secret"
    # never on a command line, never printed; the file it went in is gone
    assert encoded not in "\n".join(made) and encoded not in result.stdout + result.stderr
    assert not Path((tmp_path / "az-secret-path").read_text()).exists()
    assert f"made the input-encryption-key in the Key Vault kv-test (key id {key_id})" in result.stdout
    # and the app fetches its Key Vault references again
    assert made[-1] == (
        f"rest --method post -o none --url {APP_ID}/config/configreferences/appsettings/refresh"
        "?api-version=2022-03-01"
    )


def test_two_runs_draw_two_keys(tmp_path: Path) -> None:
    values = []
    for run in ("one", "two"):
        assert postprovision(stand_ins(tmp_path / run, MAKES_IT)).returncode == 0
        values.append((tmp_path / run / "az-secret-file").read_text())
    assert values[0] != values[1]


def test_a_vault_that_has_the_key_is_left_alone(tmp_path: Path) -> None:
    result = postprovision(stand_ins(tmp_path, [["secret list", "1", 0, None]]))
    assert result.returncode == 0, result.stderr
    assert lines(tmp_path / "az-calls.txt") == [LIST]
    assert "the Key Vault kv-test has its input-encryption-key" in result.stdout


def test_a_vault_that_does_not_answer_yet_is_asked_again(tmp_path: Path) -> None:
    # A role assignment made by the same provisioning takes a while to reach the vault: 403 at first.
    result = postprovision(stand_ins(tmp_path, [["secret list", "", 1, 2], *MAKES_IT]))
    assert result.returncode == 0, result.stderr
    assert [c for c in lines(tmp_path / "az-calls.txt") if "secret list" in c] == [LIST] * 3
    assert lines(tmp_path / "sleep-calls.txt") == ["10", "10"]
    assert (tmp_path / "az-secret-file").exists()


def test_a_vault_that_never_answers_fails_naming_the_role(tmp_path: Path) -> None:
    result = postprovision(stand_ins(tmp_path, [["secret list", "", 1, None]]))
    assert result.returncode == 1
    assert "Key Vault Secrets Officer" in result.stderr
    assert len(lines(tmp_path / "az-calls.txt")) == 18 and len(lines(tmp_path / "sleep-calls.txt")) == 17
    assert not (tmp_path / "az-secret-file").exists()


def test_a_refused_set_fails_and_leaves_no_file(tmp_path: Path) -> None:
    result = postprovision(stand_ins(tmp_path, [["secret list", "0", 0, None], ["secret set", "", 1, None]]))
    assert result.returncode == 1 and "could not set the secret input-encryption-key" in result.stderr
    assert not Path((tmp_path / "az-secret-path").read_text()).exists()


def test_a_failed_refresh_only_warns(tmp_path: Path) -> None:
    answers: list[list[Any]] = [*MAKES_IT[:3], ["rest --method post", "", 1, None]]
    result = postprovision(stand_ins(tmp_path, answers))
    assert result.returncode == 0
    assert "could not have func-test fetch its Key Vault references again" in result.stderr


@pytest.mark.parametrize(
    "env, why",
    [
        ({"AZURE_KEY_VAULT_NAME": ""}, "AZURE_KEY_VAULT_NAME is not set"),
        ({"INPUT_ENCRYPTION_KEY_SECRET_NAME": ""}, "INPUT_ENCRYPTION_KEY_SECRET_NAME is not set"),
        ({"AZURE_KEY_VAULT_NAME": "kv'];x"}, "which is not a vault name"),
        ({"INPUT_ENCRYPTION_KEY_SECRET_NAME": "key']|[0"}, "which is not a secret name"),
    ],
)
def test_missing_or_odd_names_are_refused_before_any_call(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    result = postprovision(stand_ins(tmp_path, MAKES_IT), **env)
    assert result.returncode == 1 and why in result.stderr, result.stderr
    assert lines(tmp_path / "az-calls.txt") == []


def test_skip_leaves_the_vault_alone(tmp_path: Path) -> None:
    result = postprovision(stand_ins(tmp_path, MAKES_IT), INPUT_ENCRYPTION_KEY_SETUP="skip")
    assert result.returncode == 0 and lines(tmp_path / "az-calls.txt") == []


def test_the_windows_hook_does_the_same_steps() -> None:
    text = (HOOKS / "postprovision.ps1").read_text()
    for needle in (
        "$env:INPUT_ENCRYPTION_KEY_SETUP -eq 'skip'",
        "az keyvault secret list --vault-name $vault --query \"length([?name=='$secret'])\" -o tsv",
        "if ($tries -ge 18)",
        "Start-Sleep -Seconds 10",
        "[System.Security.Cryptography.RandomNumberGenerator]::GetBytes(32)",
        "$keyId = 'k' + [DateTime]::UtcNow.ToString('yyyyMMdd')",
        "Set-Content -Path $file -NoNewline",
        'az keyvault secret set --vault-name $vault --name $secret --file "$file" --encoding utf-8',
        "Remove-Item -Force $file",
        "/config/configreferences/appsettings/refresh?api-version=2022-03-01",
    ):
        assert needle in text, needle
    assert "--value" not in text
