"""Command-line behaviour: unusable config files exit with code 2 and say why; SIGTERM exits cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from tests.servicebus_emulator.conftest import RunningEmulator, write_config
from tests.servicebus_emulator.helpers import client_for
from tests.support import free_port


def run_emulator(config: Path) -> subprocess.CompletedProcess[str]:
    """Run the emulator CLI with a config; it should exit on its own (bad configs never listen)."""
    return subprocess.run(
        [sys.executable, "-m", "servicebus_emulator", "--config", str(config), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=30,
    )


def not_json(path: Path) -> Path:
    path.write_text("{ this is not json", encoding="utf-8")
    return path


def with_sessions(path: Path) -> Path:
    return write_config(path, {"orders": {"RequiresSession": True}})


def bad_duration(path: Path) -> Path:
    return write_config(path, {"orders": {"LockDuration": "PTX"}})


def missing(path: Path) -> Path:
    return path.parent / "does-not-exist.json"


@pytest.mark.parametrize(
    ("make_config", "expected"),
    [
        pytest.param(not_json, ["not valid JSON"], id="not-json"),
        pytest.param(with_sessions, ["RequiresSession", "session"], id="requires-session"),
        pytest.param(bad_duration, ["LockDuration", "PTX", "duration"], id="bad-duration"),
        pytest.param(missing, ["does-not-exist.json", "cannot read"], id="missing-file"),
    ],
)
def test_bad_config_exits_2_with_a_reason(
    tmp_path: Path, make_config: Callable[[Path], Path], expected: list[str]
) -> None:
    config = make_config(tmp_path / "config.json")
    result = run_emulator(config)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(config) in result.stderr
    for text in expected:
        assert text in result.stderr, f"{text!r} not in stderr:\n{result.stderr}"


def test_sigterm_stops_emulator_with_exit_code_0(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage(b"x"))
        # A client is connected while the emulator is asked to stop.
        os.kill(emulator.process.pid, signal.SIGTERM)
        returncode = emulator.process.wait(10)

    assert returncode == 0, emulator.log()
    assert "Traceback" not in emulator.log()
