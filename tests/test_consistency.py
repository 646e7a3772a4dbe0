"""Names that must agree across the code, the local queue config, the sample settings and the docs."""

from __future__ import annotations

import json
from pathlib import Path

from devhost.functions import load_functions
from engine import queues
from orders.catalog import CATALOG, SERVICES
from orders.settings import SERVICE_URL_SETTINGS, SETTING_NAMES, WAIT_SETTINGS
from servicebus_emulator.config import load_config

ROOT = Path(__file__).resolve().parents[1]
AZURE_ONLY = {"STATE_STORE_ENDPOINT", "AZURE_CLIENT_ID"}


def test_every_queue_the_functions_use_is_in_the_emulator_config() -> None:
    functions = load_functions(ROOT)
    used = {f.queue_name for f in functions if f.queue_name}
    configured = set(load_config(ROOT / "local" / "servicebus-config.json").queues)
    # every version's agents: an older version still deployed keeps its agents' queues
    assert used == set(queues.all_queues(CATALOG.agents)) - {queues.STATUS_QUEUE}
    assert configured == set(queues.all_queues(CATALOG.agents)), "run python -m orders.generate"


def test_every_setting_is_in_the_sample_and_the_settings_doc() -> None:
    sample = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    settings_doc = (ROOT / "docs" / "deploying.md").read_text()  # its Settings table
    # One per declared service, and one per wait that names a setting: documented as a pattern, since a
    # team's catalog declares its own.
    derived = set(SERVICE_URL_SETTINGS.values()) | set(WAIT_SETTINGS)
    assert "`<SERVICE>_SERVICE_URL`" in settings_doc
    assert "Each wait of a workflow may name such a setting" in settings_doc
    for name in SETTING_NAMES:
        assert name in derived or f"`{name}`" in settings_doc, f"{name}: not in docs/deploying.md's Settings"
        if name not in AZURE_ONLY:
            assert name in sample, f"{name}: not in local.settings.sample.json (python -m orders.generate)"


def test_the_app_registers_the_engine_and_one_agent_per_declared_service() -> None:
    names = {f.name for f in load_functions(ROOT)}
    assert {"submit_order", "get_order", "list_orders", "resubmit_order", "cancel_order", "health"} <= names
    assert {"scheduler", "scheduler_replies", "supervisor"} <= names
    agents = {name for name in names if name.startswith("agent_")}
    assert agents == {service.function_name for service in SERVICES}
