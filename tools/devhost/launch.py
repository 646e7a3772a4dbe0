"""Start ``orders-devhost`` as a child process on free ports: for the demo, the benchmarks and the tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from servicebus_emulator.launcher import stop


@dataclass
class RunningDevhost:
    """A started stack: its process and ports."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    sim_port: int
    sb_port: int
    azurite_port: int
    keys: dict[str, str] = field(default_factory=dict)  # per role, with auth="roles"

    @property
    def api_url(self) -> str:
        """Base URL of the functions' HTTP API (routes under /api)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def simulators_url(self) -> str:
        """Base URL of the remote-service simulators."""
        return f"http://127.0.0.1:{self.sim_port}"

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM by PID (the devhost stops its children), SIGKILL if it does not exit in time."""
        stop(self.process, timeout=timeout)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different TCP ports nothing listens on now (bound together, so none is handed out twice)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _ready(data_dir: Path) -> bool:
    try:
        return bool(json.loads((data_dir / "devhost.json").read_text()).get("ready"))
    except (OSError, ValueError):
        return False


def start(
    data_dir: Path,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    timeout: float = 120,
    function_key: str | None = None,
    master_key: str | None = None,
    auth: str = "open",
    trust_principal_headers: bool = False,
    storefronts: tuple[str, ...] = (),
    app_dir: Path | None = None,
    beside: Path | None = None,
    beside_workers: int = 1,
    hold_formats: bool = False,
) -> RunningDevhost:
    """Start the stack with ``env`` over this process's environment; return once ``/api/health`` answers.

    ``function_key`` and ``master_key`` turn on the HTTP key checks (``--function-key``, ``--master-key``);
    ``auth="roles"`` the API's roles (``--auth roles``, the keys then in ``RunningDevhost.keys``), and
    ``trust_principal_headers`` lets clients act as any Entra ID principal (``--trust-principal-headers``);
    ``storefronts`` declares storefronts (``--storefronts``; their keys in ``RunningDevhost.keys``).
    ``app_dir`` runs the workers on another app (``--app-dir``), ``beside`` adds ``beside_workers`` workers of
    another release's checkout (``--beside``); ``hold_formats`` holds the formats switch at the previous
    release's (``--hold-formats``).

    Raises RuntimeError (after stopping it) if the stack exits or does not answer in ``timeout`` seconds.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    others = [p for p in free_ports(4) if p != port]
    ports = [port or others.pop(), *others[:3]]
    command = [sys.executable, "-m", "devhost.stack", "--workers", str(workers), "--data-dir", str(data_dir)]
    for flag, value in zip(("--port", "--sim-port", "--sb-port", "--azurite-port"), ports, strict=True):
        command += [flag, str(value)]
    for flag, key in (("--function-key", function_key), ("--master-key", master_key)):
        if key:
            command += [flag, key]
    command += ["--auth", auth] + (["--trust-principal-headers"] if trust_principal_headers else [])
    if storefronts:
        command += ["--storefronts", ",".join(storefronts)]
    if app_dir is not None:
        command += ["--app-dir", str(app_dir)]
    if beside is not None:
        command += ["--beside", str(beside), "--beside-workers", str(beside_workers)]
    if hold_formats:
        command.append("--hold-formats")
    with (data_dir / "devhost.out").open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    running = RunningDevhost(process, data_dir, ports[0], ports[1], ports[2], ports[3])
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"orders-devhost exited with {process.returncode}; see {data_dir / 'devhost.out'}"
            )
        # Ready when the devhost itself says so: worker 1 may answer before the devhost has seen it, and a
        # worker that dies before then ends the start-up instead of being restarted.
        if _ready(data_dir):
            try:
                if httpx.get(f"{running.api_url}/api/health", timeout=1).status_code == 200:
                    running.keys = dict(json.loads((data_dir / "devhost.json").read_text()).get("keys", {}))
                    return running
            except httpx.HTTPError:
                pass
        if time.monotonic() > deadline:
            running.stop()
            raise RuntimeError(
                f"orders-devhost did not answer within {timeout}s; see {data_dir / 'devhost.out'}"
            )
        time.sleep(0.2)  # waiting for servers to start: there is no event to wait on
