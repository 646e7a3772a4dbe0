"""The Azure deployment agrees with the code: every Bicep file parses, and queues, app settings, alert
event names, role assignments, security switches and the azd wiring match what the code uses.

No Bicep CLI or Azure here: the files are parsed with pycep-parser (the parser Checkov uses) and the
parsed JSON is compared with the code's constants, local/servicebus-config.json and azure.yaml.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import isodate
import pytest
import yaml
from pycep import BicepParser

from adapters.table_store import watch_table_name
from engine import queues, telemetry
from orders.catalog import FULFILMENT
from orders.settings import SETTING_NAMES
from simulators.table_ledger import ledger_table_name

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
APP = INFRA / "app"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))
LOCAL_ONLY_SETTINGS = {"STATE_STORE_CONNECTION"}

# Built-in role definition IDs (the same in every tenant).
SERVICE_BUS_DATA_SENDER = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39"
SERVICE_BUS_DATA_RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
STORAGE_TABLE_DATA_CONTRIBUTOR = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
STORAGE_BLOB_DATA_OWNER = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
OWNER_ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
    "090c5cfd-751d-490a-894a-3ce6f1109419": "Azure Service Bus Data Owner",
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
    "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
}

SERVICE_BUS = "Microsoft.ServiceBus/namespaces"
STORAGE = "Microsoft.Storage/storageAccounts"
APP_INSIGHTS = "Microsoft.Insights/components"


# ---- helpers --------------------------------------------------------------------------------------------
@functools.cache
def parsed(path: Path) -> dict[str, Any]:
    """pycep's JSON for one Bicep file."""
    return BicepParser().parse(file_path=path)


def module(path: Path, avm: str) -> dict[str, Any]:
    """The params of the one call of the Azure Verified Module ``avm`` (e.g. avm/res/web/site) in ``path``."""
    calls = [m for m in parsed(path).get("modules", {}).values() if m.get("detail", {}).get("path") == avm]
    assert len(calls) == 1, f"{path.name}: expected one call of {avm}, found {len(calls)}"
    return calls[0]["config"]["params"]


def modules_of(path: Path, avm: str) -> list[dict[str, Any]]:
    """The params of every call of ``avm`` in ``path``."""
    found = parsed(path).get("modules", {}).values()
    return [m["config"]["params"] for m in found if m.get("detail", {}).get("path") == avm]


def variable(path: Path, name: str) -> Any:
    return parsed(path)["variables"][name]["value"]


def body(resource: dict[str, Any]) -> dict[str, Any]:
    """A resource's body, unwrapping ``if (...)`` conditions."""
    config = resource["config"]
    return config["config"] if "condition" in config and "config" in config else config


def strings(node: Any) -> Iterator[str]:
    """Every string anywhere in a parsed expression."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def duration(text: str) -> timedelta:
    return isodate.parse_duration(text)


# ---- every file parses; every parameter is described ------------------------------------------------------
def test_the_expected_bicep_files_exist() -> None:
    names = {p.relative_to(INFRA).as_posix() for p in BICEP_FILES}
    expected = {"main.bicep", "app/rbac.bicep", "app/alerts.bicep", "app/function-app.bicep"}
    assert expected <= names
    assert not list(INFRA.rglob("*.bicepparam")), "pycep and Checkov cannot parse .bicepparam files"


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: p.relative_to(INFRA).as_posix())
def test_every_bicep_file_parses(path: Path) -> None:
    assert parsed(path), f"{path} parsed to nothing"
    text = path.read_text()
    assert "..." not in re.sub(r"//.*", "", text), f"{path}: spread syntax is not parsed by pycep or Checkov"


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: p.relative_to(INFRA).as_posix())
def test_every_parameter_has_a_description(path: Path) -> None:
    for name, param in parsed(path).get("parameters", {}).items():
        described = [d for d in param["decorators"] if d["type"] == "description" and d["argument"].strip()]
        assert described, f"{path.name}: parameter {name} has no @description"


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: p.relative_to(INFRA).as_posix())
def test_every_local_module_exists_and_registry_modules_are_pinned_avm(path: Path) -> None:
    for name, mod in parsed(path).get("modules", {}).items():
        detail = mod["detail"]
        if mod["type"] == "local":
            assert (path.parent / detail["path"]).is_file(), f"{path.name}: module {name} -> {detail['path']}"
        else:
            assert detail["path"].startswith("avm/res/"), f"{path.name}: {name} is not an AVM resource module"
            assert re.fullmatch(r"\d+\.\d+\.\d+", detail["tag"]), f"{path.name}: {name} is not pinned"


# ---- azd wiring -----------------------------------------------------------------------------------------
def test_main_creates_the_resource_group_with_azd_tags_and_token() -> None:
    main = parsed(INFRA / "main.bicep")
    assert main["globals"]["scope"]["value"] == "subscription"
    groups = [r for r in main["resources"].values() if r["type"] == "Microsoft.Resources/resourceGroups"]
    assert len(groups) == 1
    assert body(groups[0])["name"] == "rg-${environmentName}"
    assert "'azd-env-name'" in variable(INFRA / "main.bicep", "tags")
    text = (INFRA / "main.bicep").read_text()
    assert "toLower(uniqueString(subscription().id, environmentName, location))" in text


def test_parameters_file_feeds_azd_variables_to_existing_parameters() -> None:
    values = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    declared = parsed(INFRA / "main.bicep")["parameters"]
    assert set(values) <= set(declared), set(values) - set(declared)
    assert values["environmentName"]["value"] == "${AZURE_ENV_NAME}"
    assert values["location"]["value"] == "${AZURE_LOCATION}"
    assert values["principalId"]["value"] == "${AZURE_PRINCIPAL_ID}"
    assert values["alertEmail"]["value"] == "${ALERT_EMAIL=}"
    for name in ("inventoryServiceUrl", "paymentServiceUrl", "shippingServiceUrl"):
        assert values[name]["value"].endswith("=}"), f"{name} must default to empty (the simulators)"


def test_the_function_app_carries_the_service_name_of_azure_yaml() -> None:
    azure = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert azure["infra"]["path"] == "infra"
    (service_name, service), *others = azure["services"].items()
    assert not others, "one service: the Function App"
    assert service == {"project": ".", "language": "python", "host": "function"}
    assert (ROOT / service["project"] / "function_app.py").is_file()

    assert variable(INFRA / "main.bicep", "serviceName") == service_name
    api = parsed(INFRA / "main.bicep")["modules"]["api"]["config"]["params"]
    assert api["serviceName"] == "serviceName"
    tags = module(APP / "function-app.bicep", "avm/res/web/site")["tags"]
    assert tags["function"]["type"] == "union"
    assert tags["function"]["parameters"]["arg_2"] == {"'azd-service-name'": "serviceName"}


def test_main_outputs_what_azd_and_the_readme_use() -> None:
    outputs = set(parsed(INFRA / "main.bicep")["outputs"])
    assert {
        "AZURE_LOCATION",
        "AZURE_TENANT_ID",
        "AZURE_RESOURCE_GROUP",
        "AZURE_FUNCTION_APP_NAME",
        "SERVICE_API_NAME",
        "SERVICE_API_ENDPOINTS",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
    } <= outputs


# ---- queues ---------------------------------------------------------------------------------------------
QUEUE_PROPERTIES = {
    # Bicep name -> emulator Config.json name
    "lockDuration": "LockDuration",
    "maxDeliveryCount": "MaxDeliveryCount",
    "defaultMessageTimeToLive": "DefaultMessageTimeToLive",
    "deadLetteringOnMessageExpiration": "DeadLetteringOnMessageExpiration",
    "requiresDuplicateDetection": "RequiresDuplicateDetection",
    "duplicateDetectionHistoryTimeWindow": "DuplicateDetectionHistoryTimeWindow",
    "requiresSession": "RequiresSession",
}
DURATIONS = {"lockDuration", "defaultMessageTimeToLive", "duplicateDetectionHistoryTimeWindow"}


def bicep_queues() -> dict[str, dict[str, Any]]:
    return {q["name"]: q for q in variable(APP / "servicebus.bicep", "queues")}


def emulator_queues() -> dict[str, dict[str, Any]]:
    config = json.loads((ROOT / "local" / "servicebus-config.json").read_text())
    (namespace,) = config["UserConfig"]["Namespaces"]
    return {q["Name"]: q["Properties"] for q in namespace["Queues"]}


def test_the_namespace_module_creates_the_queue_list() -> None:
    assert module(APP / "servicebus.bicep", "avm/res/service-bus/namespace")["queues"] == "queues"


def test_bicep_creates_exactly_the_queues_the_code_uses() -> None:
    assert set(bicep_queues()) == set(queues.all_queues(FULFILMENT.agents))


@pytest.mark.parametrize("queue", queues.all_queues(FULFILMENT.agents))
def test_every_queue_has_the_same_properties_in_bicep_and_the_emulator_config(queue: str) -> None:
    in_bicep = bicep_queues()[queue]
    in_emulator = emulator_queues()[queue]
    for bicep_name, emulator_name in QUEUE_PROPERTIES.items():
        assert bicep_name in in_bicep, f"{queue}: {bicep_name} is not set in Bicep"
        ours, theirs = in_bicep[bicep_name], in_emulator[emulator_name]
        if bicep_name in DURATIONS:
            ours, theirs = duration(ours), duration(theirs)
        assert ours == theirs, f"{queue}.{bicep_name}: Bicep {ours!r} != emulator config {theirs!r}"


def test_queue_properties_are_valid_for_service_bus_standard_and_premium() -> None:
    for name, queue in bicep_queues().items():
        # enableExpress is refused by Premium, partitioning is per namespace there, and the message size
        # limit is read by Premium only: the same queues must deploy on either tier
        assert not {"enableExpress", "enablePartitioning", "maxMessageSizeInKilobytes"} & set(queue), name
        assert timedelta(seconds=5) <= duration(queue["lockDuration"]) <= timedelta(minutes=5), name
        assert 1 <= queue["maxDeliveryCount"] <= 2000, name
        assert queue["requiresSession"] is False, f"{name}: the triggers do not use sessions"
        window = duration(queue["duplicateDetectionHistoryTimeWindow"])
        assert timedelta(seconds=20) <= window <= timedelta(days=7), name


# ---- app settings ---------------------------------------------------------------------------------------
def app_settings() -> dict[str, Any]:
    return variable(APP / "function-app.bicep", "appSettings")


def test_the_site_module_receives_the_app_settings() -> None:
    configs = module(APP / "function-app.bicep", "avm/res/web/site")["configs"]
    assert configs == [{"name": "appsettings", "properties": "appSettings"}]


def test_every_setting_the_code_reads_is_set_in_the_function_app() -> None:
    expected = (set(SETTING_NAMES) - LOCAL_ONLY_SETTINGS) | {
        "ServiceBusConnection__fullyQualifiedNamespace",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
    }
    missing = expected - set(app_settings())
    assert not missing, f"set in infra/app/function-app.bicep: {sorted(missing)}"
    assert not LOCAL_ONLY_SETTINGS & set(app_settings()), "STATE_STORE_CONNECTION is for local runs only"


def test_every_connection_is_identity_based() -> None:
    settings = app_settings()
    for connection in ("AzureWebJobsStorage", "ServiceBusConnection"):
        assert connection not in settings, f"{connection} would be a connection string with a secret"
        assert settings[f"{connection}__credential"] == "managedidentity"
        assert settings[f"{connection}__clientId"] == "identityClientId"
    assert settings["AzureWebJobsStorage__accountName"] == "storageAccountName"
    assert settings["ServiceBusConnection__fullyQualifiedNamespace"] == "serviceBusNamespace"
    assert settings["AZURE_CLIENT_ID"] == "identityClientId"
    assert (
        settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"]
        == "ClientId=${identityClientId};Authorization=AAD"
    )
    assert settings["STATE_STORE_ENDPOINT"] == "https://${storageAccountName}.table.${storageSuffix}"
    secrets = [s for s in strings(settings) if re.search(r"AccountKey=|SharedAccessKey=|listKeys", s)]
    assert not secrets, secrets


def test_empty_service_urls_point_at_the_hosted_simulators() -> None:
    app = (ROOT / "function_app.py").read_text()
    assert '"ENABLE_SIMULATORS"' in app and 'route="sim/' in app, "the app serves them under /api/sim"
    settings = app_settings()
    assert variable(APP / "function-app.bicep", "simulatorsUrl") == "${baseUrl}/api/sim"
    for name, param in (
        ("INVENTORY_SERVICE_URL", "inventoryServiceUrl"),
        ("PAYMENT_SERVICE_URL", "paymentServiceUrl"),
        ("SHIPPING_SERVICE_URL", "shippingServiceUrl"),
    ):
        operands = settings[name]["operator"]["operands"]
        assert operands["condition"]["function"] == {"type": "empty", "parameters": {"item_to_test": param}}
        assert (operands["true_value"], operands["false_value"]) == ("simulatorsUrl", param)
    enable = settings["ENABLE_SIMULATORS"]["operator"]["operands"]
    assert (enable["condition"], enable["true_value"], enable["false_value"]) == (
        "useSimulators",
        "true",
        "false",
    )


def test_the_hosted_simulators_get_a_key_that_is_never_output() -> None:
    main = parsed(INFRA / "main.bicep")
    param = main["parameters"]["simulatorsKey"]
    assert {"type": "secure"} in param["decorators"], "the key is a @secure() parameter"
    assert param["default"] == {"function": {"type": "new_guid"}}
    assert main["modules"]["api"]["config"]["params"]["simulatorsKey"] == "simulatorsKey"
    app = parsed(APP / "function-app.bicep")
    assert {"type": "secure"} in app["parameters"]["simulatorsKey"]["decorators"]

    # The simulators check the key themselves: no host key is created (that child type has no published
    # definition, and the host must be running to accept one).
    assert not [r for r in app.get("resources", {}).values() if "functionKeys" in r["type"]]

    enabled = app_settings()["SIMULATORS_KEY"]["operator"]["operands"]
    assert (enabled["condition"], enabled["true_value"], enabled["false_value"]) == (
        "useSimulators",
        "simulatorsKey",
        "",
    )
    for path in BICEP_FILES:
        for name, output in parsed(path).get("outputs", {}).items():
            assert "simulatorsKey" not in set(strings(output)), f"{path.name}: output {name} holds the key"


def test_the_function_app_is_python_311_on_flex_consumption_with_the_identity() -> None:
    site = module(APP / "function-app.bicep", "avm/res/web/site")
    assert site["kind"] == "functionapp,linux"
    assert site["httpsOnly"] is True
    assert site["siteConfig"]["ftpsState"] == "Disabled"
    assert site["siteConfig"]["minTlsVersion"] == "1.2"
    assert site["siteConfig"]["alwaysOn"] is False
    assert site["managedIdentities"] == {"userAssignedResourceIds": ["identityResourceId"]}
    config = site["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "3.11"}
    assert config["deployment"]["storage"]["authentication"]["type"] == "UserAssignedIdentity"
    plan = module(APP / "hosting-plan.bicep", "avm/res/web/serverfarm")
    assert (plan["skuName"], plan["reserved"]) == ("FC1", True)


# ---- alerts ---------------------------------------------------------------------------------------------
def alert_queries() -> list[str]:
    rules = modules_of(APP / "alerts.bicep", "avm/res/insights/scheduled-query-rule")
    return [c["query"] for rule in rules for c in rule["criterias"]["allOf"]]


@pytest.mark.parametrize(
    "event",
    sorted({telemetry.ORDER_ENTERED_ERROR, *telemetry.ALERT_EVENTS, telemetry.SUPERVISOR_SWEEP_COMPLETED}),
)
def test_a_log_alert_queries_the_exact_event_name(event: str) -> None:
    expected = f'customEvents | where name == "{event}"'
    assert expected in alert_queries(), f"no log alert runs: {expected}"


def test_the_supervisor_alert_fires_when_no_sweep_completed() -> None:
    rules = modules_of(APP / "alerts.bicep", "avm/res/insights/scheduled-query-rule")
    (rule,) = [
        r for r in rules if telemetry.SUPERVISOR_SWEEP_COMPLETED in r["criterias"]["allOf"][0]["query"]
    ]
    (criterion,) = rule["criterias"]["allOf"]
    assert (criterion["timeAggregation"], criterion["operator"], criterion["threshold"]) == (
        "Count",
        "LessThan",
        1,
    )
    window = parsed(APP / "alerts.bicep")["parameters"]["supervisorSilenceWindow"]["default"]
    assert rule["windowSize"] == "supervisorSilenceWindow"
    assert duration(window) >= timedelta(minutes=10), "several Supervisor periods"


def test_dead_lettered_messages_on_any_queue_alert() -> None:
    alert = module(APP / "alerts.bicep", "avm/res/insights/metric-alert")
    (criterion,) = alert["criteria"]["allof"]
    assert criterion["metricName"] == "DeadletteredMessages"
    assert (criterion["operator"], criterion["threshold"]) == ("GreaterThan", 0)
    assert criterion["dimensions"] == [{"name": "EntityName", "operator": "Include", "values": ["*"]}]


def test_the_action_group_mails_the_alert_address_only_when_set() -> None:
    receivers = variable(APP / "alerts.bicep", "emailReceivers")["operator"]["operands"]
    assert receivers["condition"]["function"]["parameters"] == {"item_to_test": "alertEmail"}
    assert receivers["true_value"] == []
    assert receivers["false_value"][0]["emailAddress"] == "alertEmail"
    group = module(APP / "alerts.bicep", "avm/res/insights/action-group")
    assert group["emailReceivers"] == "emailReceivers"


# ---- role assignments -----------------------------------------------------------------------------------
def role_assignments() -> list[tuple[str, str, str, bool]]:
    """(scope resource type, role GUID, principal, conditional) for every assignment in rbac.bicep."""
    rbac = parsed(APP / "rbac.bicep")
    roles = variable(APP / "rbac.bicep", "roles")
    existing = {name: r["type"] for name, r in rbac["resources"].items() if r["existing"]}
    found = []
    for resource in rbac["resources"].values():
        if resource["type"] != "Microsoft.Authorization/roleAssignments":
            continue
        config = body(resource)
        role_ref = config["properties"]["roleDefinitionId"]["function"]["parameters"]["resource_name_1"]
        role = roles[role_ref["operator"]["operands"]["operand_2"]]
        conditional = "condition" in resource["config"]
        found.append((existing[config["scope"]], role, config["properties"]["principalId"], conditional))
    return found


# What the code does with each service, and the role that allows it.
CODE_ACCESS = [
    ("function_app.py", "service_bus_queue_trigger", SERVICE_BUS, SERVICE_BUS_DATA_RECEIVER),
    ("src/adapters/servicebus.py", "send_messages", SERVICE_BUS, SERVICE_BUS_DATA_SENDER),
    ("src/adapters/table_store.py", "submit_transaction", STORAGE, STORAGE_TABLE_DATA_CONTRIBUTOR),
    ("host.json", "extensionBundle", STORAGE, STORAGE_BLOB_DATA_OWNER),  # host storage, deployment package
    ("src/orders/telemetry_setup.py", "configure_azure_monitor", APP_INSIGHTS, MONITORING_METRICS_PUBLISHER),
]


@pytest.mark.parametrize("where, usage, scope, role", CODE_ACCESS, ids=[c[1] for c in CODE_ACCESS])
def test_every_data_plane_access_of_the_app_has_its_role(
    where: str, usage: str, scope: str, role: str
) -> None:
    assert usage in (ROOT / where).read_text(), f"{where} no longer uses {usage}: review this table"
    assert (scope, role, "appPrincipalId", False) in role_assignments()


@pytest.mark.parametrize(
    "scope, role",
    [
        (SERVICE_BUS, SERVICE_BUS_DATA_SENDER),
        (SERVICE_BUS, SERVICE_BUS_DATA_RECEIVER),
        (STORAGE, STORAGE_TABLE_DATA_CONTRIBUTOR),
        (STORAGE, STORAGE_BLOB_DATA_OWNER),
    ],
)
def test_the_deploying_user_optionally_gets_the_same_data_roles(scope: str, role: str) -> None:
    assert (scope, role, "userPrincipalId", True) in role_assignments()
    grant = variable(APP / "rbac.bicep", "grantUser")
    assert grant["operator"]["type"] == "not"
    assert grant["operator"]["operands"]["bool_value"]["function"] == {
        "type": "empty",
        "parameters": {"item_to_test": "userPrincipalId"},
    }


def test_the_rbac_module_gets_the_app_identity_and_the_deploying_user() -> None:
    text = re.sub(r"\s+", " ", (INFRA / "main.bicep").read_text())
    assert re.search(
        r"module rbac 'app/rbac.bicep' = \{[^}]*appPrincipalId: identity.outputs.principalId", text
    )
    assert re.search(r"module rbac 'app/rbac.bicep' = \{[^}]*userPrincipalId: principalId ", text)


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: p.relative_to(INFRA).as_posix())
def test_no_owner_role_anywhere_and_all_assignments_in_the_rbac_module(path: Path) -> None:
    text = path.read_text().lower()
    for guid, name in OWNER_ROLES.items():
        assert guid not in text, f"{path.name} grants {name}"
    assert not re.search(r"roledefinitionidorname:\s*'[^']*owner", text), f"{path.name} grants an Owner role"
    if path.name != "rbac.bicep":
        assert "microsoft.authorization/roleassignments" not in text, (
            f"{path.name}: role assignments go in rbac.bicep"
        )
        assert "roleassignments:" not in text, f"{path.name}: role assignments go in rbac.bicep"


# ---- security switches ------------------------------------------------------------------------------------
def test_storage_accepts_entra_id_only_and_holds_the_state_tables() -> None:
    account = module(APP / "storage.bicep", "avm/res/storage/storage-account")
    assert account["allowSharedKeyAccess"] is False
    assert account["allowBlobPublicAccess"] is False
    assert account["minimumTlsVersion"] == "TLS1_2"
    assert account["blobServices"]["containers"] == [
        {"name": "deploymentContainerName", "publicAccess": "None"}
    ]
    tables = [t["name"] for t in account["tableServices"]["tables"]]
    assert tables == ["stateTableName", "${stateTableName}watch", "${stateTableName}sim"]
    # with the default name: orders, orderswatch and orderssim, as the store and the simulators expect
    default = parsed(INFRA / "main.bicep")["parameters"]["stateTableName"]["default"]
    assert [default, f"{default}watch", f"{default}sim"] == [
        "orders",
        watch_table_name("orders"),
        ledger_table_name("orders"),
    ]


def allowed(parameter: dict[str, Any]) -> list[Any]:
    return next(d["argument"] for d in parameter["decorators"] if d["type"] == "allowed")


def test_service_bus_is_standard_by_default_and_premium_by_parameter() -> None:
    main = parsed(INFRA / "main.bicep")["parameters"]
    sku, units = main["serviceBusSku"], main["serviceBusCapacity"]
    assert (sku["default"], allowed(sku)) == ("Standard", ["Standard", "Premium"])
    # the AVM module's skuType allows Basic, Standard, Premium; Premium namespaces have 1-16 units
    assert (units["default"], allowed(units)) == (1, [1, 2, 4, 8, 16])
    values = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert values["serviceBusSku"]["value"] == "${SERVICE_BUS_SKU=Standard}"
    assert values["serviceBusCapacity"]["value"] == "${SERVICE_BUS_CAPACITY=1}"
    params = parsed(INFRA / "main.bicep")["modules"]["messaging"]["config"]["params"]
    assert (params["sku"], params["capacity"]) == ("serviceBusSku", "serviceBusCapacity")
    inner = parsed(APP / "servicebus.bicep")
    assert allowed(inner["parameters"]["sku"]) == allowed(sku)
    assert allowed(inner["parameters"]["capacity"]) == allowed(units)
    assert variable(APP / "servicebus.bicep", "isPremium") == {
        "operator": {"type": "equals", "operands": {"operand_1": "sku", "operand_2": "Premium"}}
    }
    namespace = module(APP / "servicebus.bicep", "avm/res/service-bus/namespace")
    # capacity (messaging units) only for Premium; Standard has none
    assert namespace["skuObject"] == {
        "operator": {
            "type": "conditional",
            "operands": {
                "condition": "isPremium",
                "true_value": {"name": "Premium", "capacity": "capacity"},
                "false_value": {"name": "Standard"},
            },
        }
    }
    # zone redundancy needs Premium; the module defaults it to true, which Standard refuses
    assert namespace["zoneRedundant"] == "isPremium"


def test_service_bus_has_local_auth_disabled() -> None:
    namespace = module(APP / "servicebus.bicep", "avm/res/service-bus/namespace")
    assert namespace["disableLocalAuth"] is True
    assert namespace["authorizationRules"] == []
    assert namespace["minimumTlsVersion"] == "1.2"


def test_application_insights_has_local_auth_disabled() -> None:
    component = module(APP / "monitoring.bicep", "avm/res/insights/component")
    assert component["disableLocalAuth"] is True
