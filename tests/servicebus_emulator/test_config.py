"""The config file: the official emulator's shape, validated with readable errors."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from servicebus_emulator.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def test_the_repository_config_loads_with_the_product_queues() -> None:
    config = load_config(REPO / "local" / "servicebus-config.json")
    assert config.namespace.name == "sbemulatorns"
    assert set(config.queues) >= {"scheduler", "scheduler-replies", "order-status"}
    assert all(p.lock_duration == timedelta(minutes=1) for p in config.queues.values())


def write(tmp_path: Path, queues: list[dict[str, object]]) -> Path:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": queues}]}}))
    return path


def test_iso_durations_and_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, [{"Name": "Q", "Properties": {"LockDuration": "PT2.5S"}}]))
    queue = config.queues["q"]  # names are case-insensitive, as in Service Bus
    assert queue.lock_duration == timedelta(seconds=2.5)
    assert queue.max_delivery_count == 10
    assert queue.default_message_time_to_live == timedelta(hours=1)


@pytest.mark.parametrize(
    ("queues", "needle"),
    [
        ([{"Name": "q", "Properties": {"LockDuration": "PTX"}}], "ISO 8601"),
        ([{"Name": "q", "Properties": {"LockDuration": "P1M"}}], "days, hours"),
        ([{"Name": "q", "Properties": {"MaxDeliveryCount": 0}}], "MaxDeliveryCount"),
        ([{"Name": "q", "Properties": {"RequiresSession": True}}], "session"),
        ([{"Name": "q"}, {"Name": "Q"}], "more than once"),
        ([{"Name": ""}], "Name"),
    ],
)
def test_invalid_configs_say_why(tmp_path: Path, queues: list[dict[str, object]], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(write(tmp_path, queues))


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(bad)
