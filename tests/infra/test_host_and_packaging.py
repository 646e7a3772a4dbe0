"""host.json, the deployment package (.funcignore) and the Docker emulators agree with the code and the
queue config."""

from __future__ import annotations

import fnmatch
import json
from datetime import timedelta
from pathlib import Path

import isodate
import yaml

from devhost.host_config import load_host_settings, parse_timespan, read_host_json
from orders.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


# ---- host.json -----------------------------------------------------------------------------------------
def test_host_json_keeps_the_runtime_version_and_the_extension_bundle() -> None:
    host = read_host_json(ROOT)
    assert host["version"] == "2.0"
    assert host["extensionBundle"] == {
        "id": "Microsoft.Azure.Functions.ExtensionBundle",
        "version": "[4.*, 5.0.0)",
    }


def test_service_bus_settings_outlast_a_step_and_complete_on_success() -> None:
    service_bus = read_host_json(ROOT)["extensions"]["serviceBus"]
    assert service_bus["autoCompleteMessages"] is True, "the functions return normally on success"
    assert service_bus["prefetchCount"] == 0, "prefetched messages' locks would run out unrenewed"
    renewal = parse_timespan(service_bus["maxAutoLockRenewalDuration"])
    step = timedelta(seconds=Settings.model_fields["step_complete_by_seconds"].default)
    assert renewal > step, "a step that runs to its complete-by must keep its message locked"
    config = json.loads((ROOT / "local" / "servicebus-config.json").read_text())
    for queue in config["UserConfig"]["Namespaces"][0]["Queues"]:
        assert isodate.parse_duration(queue["Properties"]["LockDuration"]) <= renewal
    settings = load_host_settings(ROOT, environ={})
    assert settings.max_concurrent_calls == service_bus["maxConcurrentCalls"] >= 1
    assert settings.max_auto_lock_renewal_duration == renewal


def test_sampling_never_drops_the_alert_events() -> None:
    sampling = read_host_json(ROOT)["logging"]["applicationInsights"]["samplingSettings"]
    if sampling.get("isEnabled", True):
        excluded = {t.strip() for t in sampling["excludedTypes"].split(";")}
        assert {"Event", "Exception", "Request"} <= excluded


# ---- deployment package --------------------------------------------------------------------------------
def ignored(path: str) -> bool:
    """Whether .funcignore (gitignore syntax, directory patterns only here) keeps ``path`` out."""
    patterns = [
        line.strip()
        for line in (ROOT / ".funcignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    for pattern in patterns:
        bare = pattern.rstrip("/")
        if "/" in bare:  # anchored at the root
            if path == bare or path.startswith(bare + "/"):
                return True
        elif any(fnmatch.fnmatch(part, bare) for part in parts):
            return True
    return False


def test_the_package_ships_the_app_and_not_the_local_runtime() -> None:
    shipped = [
        "function_app.py",
        "host.json",
        "requirements.txt",
        "src/engine/scheduler.py",
        "src/orders/runtime.py",
        "src/adapters/table_store/__init__.py",
        "src/simulators/hosted.py",
    ]
    kept_out = [
        "tests/infra/test_bicep.py",
        "tools/devhost/worker.py",
        "tools/servicebus_emulator/broker.py",
        "tools/bicep_contracts/check.py",
        "tools/simulation/run.py",
        "tools/smoke/cli.py",
        ".venv/bin/python",
        ".venv-checkov/bin/checkov",
        "node_modules/azurite/package.json",
        "bench/orders_throughput.py",
        "local/servicebus-config.json",
        "infra/main.bicep",
        "local.settings.json",
        "docker-compose.yml",
    ]
    assert [p for p in shipped if ignored(p)] == []
    assert [p for p in kept_out if not ignored(p)] == []
    assert (ROOT / "requirements.txt").read_text().count("pytest") == 0, "test tools stay out of the app"


# ---- Docker emulators ----------------------------------------------------------------------------------
def test_compose_runs_azurite_and_the_official_service_bus_emulator_on_the_sample_ports() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    emulator = next(s for s in compose.values() if "servicebus-emulator" in s["image"])
    assert emulator["image"].startswith("mcr.microsoft.com/azure-messaging/servicebus-emulator")
    assert (
        "./local/servicebus-config.json:/ServiceBus_Emulator/ConfigFiles/Config.json" in emulator["volumes"]
    )
    assert "5672:5672" in emulator["ports"]
    assert {"ACCEPT_EULA", "SQL_SERVER", "MSSQL_SA_PASSWORD"} <= set(emulator["environment"])
    assert emulator["environment"]["SQL_SERVER"] in compose, "the emulator's SQL Server is a service here"
    azurite = next(s for s in compose.values() if "azurite" in s["image"])
    assert {"10000:10000", "10001:10001", "10002:10002"} <= set(azurite["ports"])

    sample = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    assert sample["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"  # 127.0.0.1:10000-10002
    assert "Endpoint=sb://127.0.0.1:5672;" in sample["ServiceBusConnection"]
    assert "UseDevelopmentEmulator=true" in sample["ServiceBusConnection"]
