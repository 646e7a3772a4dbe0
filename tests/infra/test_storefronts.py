"""Storefronts in Azure: the parameter ``storefronts`` of infra/main.bicep, checked there, gives each
storefront its status queue (app/servicebus.bicep), its reader Azure Service Bus Data Receiver on that
queue and nowhere else (app/rbac.bicep), the app setting STOREFRONTS and the names of the key settings
(app/function-app.bicep, the output STOREFRONT_KEY_SETTINGS), which the predeploy hook makes once.

The Bicep is evaluated offline (tests/infra/bicep_eval.py) with the values main.bicep hands its modules,
and the names are those the code uses (orders.access, engine.queues).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bicep_contracts.check import check_tree
from bicep_contracts.syntax import Access, Expr, Obj, Ref, body_object
from engine import queues
from orders.access import STOREFRONT_NAME, storefront_key_setting
from tests.infra.bicep_eval import ArmError, Evaluator, guid
from tests.smoke.fake_cli import calls, fake_cli

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
APP = INFRA / "app"
HOOKS = INFRA / "hooks"
SERVICE_BUS_DATA_RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
QUEUE = "Microsoft.ServiceBus/namespaces/queues"
NAMESPACE = "Microsoft.ServiceBus/namespaces"
KIOSK_READER = "11111111-2222-3333-4444-555555555555"
# web: no reader of its own; my-shop: a name with a hyphen; kiosk: a reader.
STOREFRONTS: list[dict[str, str]] = [
    {"name": "web"},
    {"name": "my-shop", "principalId": ""},
    {"name": "kiosk", "principalId": KIOSK_READER},
]
NAMES = [s["name"] for s in STOREFRONTS]


# ---- the deployment in small: main.bicep's values, handed to each module --------------------------------
def main(storefronts: list[Any]) -> Evaluator:
    return Evaluator(
        INFRA / "main.bicep",
        {
            "environmentName": "dev",
            "location": "westeurope",
            "simulatorsKey": "k",
            "storefronts": storefronts,
        },
    )


def param_expr(evaluator: Evaluator, module: str, name: str) -> Expr:
    """What a file passes to a module's parameter, as written."""
    body = body_object(evaluator.file.modules[module].body)
    params = body.get("params") if body is not None else None
    assert isinstance(params, Obj), f"module {module} has no params"
    value = params.get(name)
    assert value is not None, f"module {module} gets no {name}"
    return value


def module_param(evaluator: Evaluator, module: str, name: str) -> Any:
    """The value a file passes to a module's parameter."""
    return evaluator.eval(param_expr(evaluator, module, name))


def service_bus(storefronts: list[Any]) -> list[dict[str, Any]]:
    """The queues the namespace module gets."""
    names = module_param(main(storefronts), "messaging", "storefrontNames")
    return list(
        module_param(Evaluator(APP / "servicebus.bicep", {"storefrontNames": names}), "namespace", "queues")
    )


def role_assignments(storefronts: list[Any]) -> list[dict[str, Any]]:
    """Every role assignment rbac.bicep makes (the deploying user's too), evaluated."""
    evaluator = Evaluator(
        APP / "rbac.bicep",
        {
            "serviceBusNamespaceName": "sb-x",
            "appPrincipalId": "app",
            "userPrincipalId": "me",
            "storefronts": module_param(main(storefronts), "rbac", "storefronts"),
        },
    )
    found: list[dict[str, Any]] = []
    for symbol, resource in evaluator.file.resources.items():
        if resource.type == "Microsoft.Authorization/roleAssignments":
            value = evaluator.resource(symbol)
            found += value if isinstance(value, list) else [value] if value else []
    return found


def function_app(storefronts: list[Any]) -> Evaluator:
    names = module_param(main(storefronts), "api", "storefrontNames")
    return Evaluator(
        APP / "function-app.bicep",
        {
            "name": "func-x",
            "serviceUrls": "",
            "simulatorsKey": "k",
            "authClientId": "",
            "storefrontNames": names,
        },
    )


def app_settings(storefronts: list[Any]) -> dict[str, Any]:
    (config,) = [
        c for c in module_param(function_app(storefronts), "site", "configs") if c["name"] == "appsettings"
    ]
    return dict(config["properties"])


# ---- the parameter -----------------------------------------------------------------------------------------
def test_the_parameter_is_an_array_fed_from_an_azd_variable_and_empty_by_default() -> None:
    param = main([]).file.params["storefronts"]
    assert param.type == "array"
    assert param.default is not None and main([]).eval(param.default) == []
    fed = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]["storefronts"]
    assert fed == {"value": "${STOREFRONTS_JSON=[]}"}
    assert main([]).variable("storefrontList") == []


def test_each_storefront_is_passed_on_with_its_reader_or_none() -> None:
    assert main(STOREFRONTS).variable("storefrontList") == [
        {"name": "web", "principalId": ""},
        {"name": "my-shop", "principalId": ""},
        {"name": "kiosk", "principalId": KIOSK_READER},
    ]


# Names the app takes and refuses (orders.access.STOREFRONT_NAME), at the edges of the rule.
CANDIDATES = ["web", "a", "kiosk-2", "my-shop", "a" * 24, "x-", "a" * 25, "Web", "1shop", "-x", "my_shop"]
CANDIDATES += ["", "shop!", "café", "we b", "web.eu"]


@pytest.mark.parametrize("name", CANDIDATES)
def test_main_takes_exactly_the_names_the_app_takes(name: str) -> None:
    evaluator = main([{"name": "web"}, {"name": name}] if name != "web" else [{"name": name}])
    if STOREFRONT_NAME.fullmatch(name):
        assert name in evaluator.variable("checkedStorefrontNames")
        return
    with pytest.raises(ArmError) as refused:
        evaluator.variable("storefrontList")
    message = str(refused.value)
    assert "not a storefront name" in message and json.dumps([name], ensure_ascii=False) in message


def test_a_name_given_twice_stops_the_deployment() -> None:
    with pytest.raises(ArmError, match="a name is given twice"):
        main([{"name": "web"}, {"name": "kiosk"}, {"name": "web"}]).variable("storefrontList")


def test_the_modules_get_only_the_checked_storefronts() -> None:
    evaluator = main(STOREFRONTS)
    assert module_param(evaluator, "messaging", "storefrontNames") == NAMES
    assert module_param(evaluator, "api", "storefrontNames") == NAMES
    assert module_param(evaluator, "rbac", "storefronts") == evaluator.variable("storefrontList")
    # Each reads the checked list, never the parameter itself.
    for module, param in (
        ("messaging", "storefrontNames"),
        ("api", "storefrontNames"),
        ("rbac", "storefronts"),
    ):
        value = param_expr(evaluator, module, param)
        assert isinstance(value, Ref) and value.name != "storefronts", f"{module} gets them unchecked"


# ---- their queues ------------------------------------------------------------------------------------------
def test_without_storefronts_the_queues_are_the_catalogs() -> None:
    catalog = json.loads((APP / "catalog.json").read_text())["queues"]
    assert service_bus([]) == catalog


def test_each_storefront_has_its_status_queue_with_the_status_queues_properties() -> None:
    catalog = json.loads((APP / "catalog.json").read_text())["queues"]
    created = service_bus(STOREFRONTS)
    assert created[: len(catalog)] == catalog, "the catalog's queues stay as they are, the shared one too"
    (status,) = [q for q in catalog if q["name"] == queues.STATUS_QUEUE]
    own = created[len(catalog) :]
    assert [q["name"] for q in own] == [queues.status_queue(name) for name in NAMES]
    assert all({**q, "name": queues.STATUS_QUEUE} == status for q in own)
    # The engine gives a storefront's status queue the shared one's properties too.
    assert queues.queue_properties(queues.status_queue("web")) == queues.queue_properties(queues.STATUS_QUEUE)


# ---- who reads them ----------------------------------------------------------------------------------------
def test_a_storefronts_reader_may_receive_from_its_queue_and_nowhere_else() -> None:
    granted = [a for a in role_assignments(STOREFRONTS) if a["properties"]["principalId"] == KIOSK_READER]
    (assignment,) = granted
    scope = assignment["scope"]
    assert (scope["type"], scope["name"]) == (QUEUE, queues.status_queue("kiosk"))
    assert scope["parent"]["type"] == NAMESPACE and scope["parent"]["name"] == "sb-x"
    assert assignment["properties"]["roleDefinitionId"].endswith(
        f"/roleDefinitions/{SERVICE_BUS_DATA_RECEIVER}"
    )
    assert assignment["properties"]["principalType"] == "ServicePrincipal"


def test_a_storefront_without_a_reader_grants_nothing() -> None:
    with_storefronts = role_assignments(STOREFRONTS)
    without = role_assignments([])
    assert len(with_storefronts) == len(without) + 1, "kiosk's reader only"
    scopes = {a["scope"]["name"] for a in with_storefronts if a["scope"]["type"] == QUEUE}
    assert scopes == {queues.status_queue("kiosk")}
    assert role_assignments([{"name": "web", "principalId": ""}]) == without


def test_the_apps_sender_role_is_on_the_namespace_so_it_reaches_every_storefront_queue() -> None:
    app = [a for a in role_assignments(STOREFRONTS) if a["properties"]["principalId"] == "app"]
    senders = [
        a for a in app if a["properties"]["roleDefinitionId"].endswith("69a216fc-b8fb-44d8-bc22-1f3c2cd27a39")
    ]
    assert [a["scope"]["type"] for a in senders] == [NAMESPACE]


def test_each_assignment_is_named_by_its_queue_principal_and_role() -> None:
    # A stable name: deploying again finds the same assignment rather than making a second one.
    (assignment,) = [a for a in role_assignments(STOREFRONTS) if a["scope"]["type"] == QUEUE]
    assert assignment["name"] == guid(assignment["scope"]["id"], KIOSK_READER, SERVICE_BUS_DATA_RECEIVER)


# ---- the app's settings and the keys' names ----------------------------------------------------------------
def test_the_app_setting_storefronts_lists_the_names() -> None:
    assert app_settings(STOREFRONTS)["STOREFRONTS"] == "web,my-shop,kiosk"
    assert app_settings([])["STOREFRONTS"] == ""


def test_no_key_is_ever_set_by_bicep() -> None:
    # The keys live on the app only, made by the predeploy hook and kept by retainCurrentAppSettings.
    settings = app_settings(STOREFRONTS)
    assert not [name for name in settings if name.startswith("STOREFRONT_")]
    assert function_app(STOREFRONTS).variable("appSettingsConfig")["retainCurrentAppSettings"] is True


def test_the_output_names_each_storefronts_key_setting_as_the_app_reads_it() -> None:
    evaluator = function_app(STOREFRONTS)
    names = evaluator.eval(evaluator.file.outputs["storefrontKeySettings"].value)
    assert names == ",".join(storefront_key_setting(name) for name in NAMES)
    assert names == "STOREFRONT_WEB_KEY,STOREFRONT_MY_SHOP_KEY,STOREFRONT_KIOSK_KEY"
    empty = function_app([])
    assert empty.eval(empty.file.outputs["storefrontKeySettings"].value) == ""
    output = main([]).file.outputs["STOREFRONT_KEY_SETTINGS"]
    assert output.type == "string"
    assert output.value == Access(
        Ref("api", output.value.line), ("outputs", "storefrontKeySettings"), output.value.line
    )


# ---- the contract check sees them --------------------------------------------------------------------------
def test_a_mistake_in_the_storefronts_role_assignment_is_caught(tmp_path: Path) -> None:
    copy = Path(
        shutil.copytree(INFRA, tmp_path / "infra", ignore=shutil.ignore_patterns("contracts", "checks"))
    )
    rbac = copy / "app" / "rbac.bicep"
    text = rbac.read_text()
    assert text.count("      principalId: storefront.principalId\n") == 1
    rbac.write_text(
        text.replace(
            "      principalId: storefront.principalId\n", "      principalID: storefront.principalId\n"
        )
    )
    messages = [f.message for f in check_tree(copy, INFRA / "contracts")]
    assert any("unknown property 'principalID': the contract spells it 'principalId'" in m for m in messages)
    assert any("missing required property 'principalId'" in m for m in messages)


# ---- the predeploy hook makes each key once ----------------------------------------------------------------
AZD_OUTPUTS = {"AZURE_RESOURCE_GROUP": "rg-test", "AZURE_FUNCTION_APP_NAME": "func-test"}


def predeploy(bin_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "SUBMISSION_KEY", "STOREFRONT"))
    }
    base.pop("CALLBACK_SECRET_SETTINGS", None)
    return subprocess.run(
        ["sh", str(HOOKS / "predeploy.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        # The keys only: the site update strategy has its own tests (tests/smoke/test_access_hooks.py).
        env={
            **base,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            **AZD_OUTPUTS,
            "SITE_UPDATE_STRATEGY": "skip",
            **env,
        },
        cwd=ROOT,
        check=False,
    )


def test_each_storefront_key_is_made_once_like_the_submission_key(tmp_path: Path) -> None:
    az = fake_cli(
        tmp_path,
        "az",
        [
            ("name=='SUBMISSION_KEY'", "existing-key", 0),
            ("name=='STOREFRONT_WEB_KEY'", "kept", 0),
            ("name=='STOREFRONT_MY_SHOP_KEY'", "", 0),
            ("appsettings set", "", 0),
        ],
    )
    result = predeploy(tmp_path, {"STOREFRONT_KEY_SETTINGS": "STOREFRONT_WEB_KEY,STOREFRONT_MY_SHOP_KEY"})
    assert result.returncode == 0, result.stderr
    made = calls(az)
    assert [c for c in made if "appsettings set" in c] == [made[3]], made  # my-shop's only
    assert (
        "has its STOREFRONT_WEB_KEY" in result.stdout and "made the STOREFRONT_MY_SHOP_KEY" in result.stdout
    )
    assert "kept" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "names, why",
    [
        ("STOREFRONT_WEB_KEY,x;rm", "which is not a setting name"),
        ("STOREFRONT_web_KEY", "which is not a setting name"),
        ("SUBMISSION_KEY", "which is not a storefront's key setting"),
        ("STOREFRONT__KEY", "which is not a storefront's key setting"),
    ],
)
def test_a_name_that_is_not_a_storefronts_key_setting_is_refused(
    tmp_path: Path, names: str, why: str
) -> None:
    fake_cli(tmp_path, "az", [("appsettings list", "existing", 0)])
    result = predeploy(tmp_path, {"STOREFRONT_KEY_SETTINGS": names})
    assert result.returncode == 1 and why in result.stderr, result.stderr


def test_no_storefronts_no_calls_for_them(tmp_path: Path) -> None:
    az = fake_cli(tmp_path, "az", [("appsettings list", "existing", 0)])
    assert predeploy(tmp_path, {}).returncode == 0
    assert [c for c in calls(az) if "STOREFRONT" in c] == []


def test_the_windows_hook_does_the_same() -> None:
    text = (HOOKS / "predeploy.ps1").read_text()
    for needle in (
        """foreach ($name in ("$env:STOREFRONT_KEY_SETTINGS" -split ',' | Where-Object { $_ })) {""",
        "if ($name -cnotmatch '^[A-Z0-9_]+$') { Fail \"STOREFRONT_KEY_SETTINGS holds $name, which is not a "
        'setting name" }',
        "if ($name -cnotmatch '^STOREFRONT_[A-Z0-9_]+_KEY$')",
    ):
        assert needle in text, needle
    assert "    Set-Once $name\n}" in text.split("$env:STOREFRONT_KEY_SETTINGS", 1)[1]
