"""Fixtures that start the real emulator process on a free port, with a config written per test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servicebus_emulator.launcher import connection_string, free_port, launch, wait_listening
from tests.support import stop_process

DEFAULT_PROPERTIES: dict[str, Any] = {
    "DeadLetteringOnMessageExpiration": False,
    "DefaultMessageTimeToLive": "PT1H",
    "DuplicateDetectionHistoryTimeWindow": "PT20S",
    "ForwardDeadLetteredMessagesTo": "",
    "ForwardTo": "",
    "LockDuration": "PT1M",
    "MaxDeliveryCount": 10,
    "RequiresDuplicateDetection": False,
    "RequiresSession": False,
}


def write_config(path: Path, queues: dict[str, dict[str, Any]]) -> Path:
    """Write a Config.json with the given queues (properties merged over the defaults)."""
    body = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [
                        {"Name": name, "Properties": {**DEFAULT_PROPERTIES, **props}}
                        for name, props in queues.items()
                    ],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }
    path.write_text(json.dumps(body, indent=2), encoding="utf-8")
    return path


@dataclass
class RunningEmulator:
    """An emulator process started for one test."""

    process: subprocess.Popen[bytes]
    port: int
    connection_string: str
    log_path: Path

    def log(self) -> str:
        """Everything the emulator has logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


EmulatorFactory = Callable[..., RunningEmulator]
REPOSITORY = Path(__file__).resolve().parents[2]


def start_emulator(config: Path, log_path: Path) -> RunningEmulator:
    """Start the emulator process on a free port and wait until it accepts connections."""
    port = free_port()
    with log_path.open("wb") as log_file:
        try:
            process = launch(config, port, log=log_file, log_level="DEBUG")
        except RuntimeError as exc:
            raise AssertionError(f"{exc}:\n{log_path.read_text()}") from exc
    return RunningEmulator(process, port, connection_string(port), log_path)


def start_faulty_emulator(config: Path, log_path: Path) -> RunningEmulator:
    """Start ``tests.servicebus_emulator.faulty_emulator`` (the emulator with planted faults)."""
    port = free_port()
    command = [sys.executable, "-m", "tests.servicebus_emulator.faulty_emulator"]
    command += ["--port", str(port), "--config", str(config), "--log-level", "DEBUG"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPOSITORY)
    try:
        wait_listening(process, port, "127.0.0.1", 20.0, "the faulty emulator")
    except RuntimeError as exc:
        raise AssertionError(f"{exc}:\n{log_path.read_text()}") from exc
    return RunningEmulator(process, port, connection_string(port), log_path)


@pytest.fixture
def faulty_emulator(tmp_path: Path) -> Iterator[RunningEmulator]:
    """An emulator process with planted faults (see ``faulty_emulator.py``) and one queue ``q``."""
    running = start_faulty_emulator(
        write_config(tmp_path / "config.json", {"q": {}}), tmp_path / "faulty-emulator.log"
    )
    yield running
    stop_process(running.process)


@pytest.fixture
def emulator_factory(tmp_path: Path) -> Iterator[EmulatorFactory]:
    """Start emulators with given queues: ``emulator_factory(queues={"q": {"LockDuration": "PT2S"}})``."""
    started: list[RunningEmulator] = []

    def factory(queues: dict[str, dict[str, Any]] | None = None) -> RunningEmulator:
        index = len(started)
        config = write_config(tmp_path / f"config-{index}.json", queues or {"q": {}})
        running = start_emulator(config, tmp_path / f"emulator-{index}.log")
        started.append(running)
        return running

    yield factory
    for running in started:
        stop_process(running.process)


@pytest.fixture
def emulator(emulator_factory: EmulatorFactory) -> RunningEmulator:
    """An emulator with one queue named ``q`` with default properties."""
    return emulator_factory()
