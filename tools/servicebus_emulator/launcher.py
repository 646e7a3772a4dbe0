"""Start the emulator as a child process and talk to it: for the local stack, tests and benchmarks."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO


def connection_string(port: int, host: str = "127.0.0.1") -> str:
    """A connection string the azure-servicebus SDK uses for plain AMQP to this emulator.

    ``UseDevelopmentEmulator=true`` makes the SDK keep the port and skip TLS; the key is not checked.
    """
    return (
        f"Endpoint=sb://{host}:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def is_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def launch(
    config: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    log: IO[bytes] | None = None,
    log_level: str = "INFO",
    timeout: float = 20.0,
    stats_file: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``python -m servicebus_emulator`` and return once it accepts connections.

    With ``stats_file`` the emulator keeps per-queue operation counts in that file (see ``stats``).

    Raises RuntimeError (after stopping the child) if it exits or does not listen within ``timeout``.
    """
    command = [
        sys.executable,
        "-m",
        "servicebus_emulator",
        "--host",
        host,
        "--port",
        str(port),
        "--config",
        str(config),
        "--log-level",
        log_level,
    ]
    if stats_file is not None:
        command += ["--stats-file", str(stats_file)]
    process = subprocess.Popen(
        command,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    wait_listening(process, port, host, timeout, "the Service Bus emulator")
    return process


def wait_listening(process: subprocess.Popen[bytes], port: int, host: str, timeout: float, name: str) -> None:
    """Wait until ``process`` accepts connections on ``host:port``.

    Raises RuntimeError if it exits first, or (after killing it) if it does not listen within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while not is_listening(port, host):
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"{name} did not listen on {host}:{port} within {timeout}s")
        time.sleep(0.05)  # polling a port: there is no event to wait on


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
    """Stop a child by its PID: ``sig`` (SIGTERM unless it saves its data on another), then SIGKILL if
    it has not exited within ``timeout`` seconds. Returns its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode
