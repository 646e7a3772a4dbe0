"""Start Azurite's Table service from the project's own npm install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import IO

from servicebus_emulator.launcher import wait_listening

REPO_ROOT = Path(__file__).resolve().parents[2]

# Azurite's well-known development account; the key is public and only valid against the emulator.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def table_connection_string(port: int, host: str = "127.0.0.1") -> str:
    """The connection string for Azurite's Table service on ``host:port``."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"TableEndpoint=http://{host}:{port}/{DEV_ACCOUNT};"
    )


def azurite_table_binary() -> Path:
    """``node_modules/.bin/azurite-table``; installed by ``make install`` (npm ci)."""
    path = REPO_ROOT / "node_modules" / ".bin" / "azurite-table"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make install` (it runs npm ci)")
    if shutil.which("node") is None:
        raise RuntimeError("node is not on PATH; Azurite needs Node.js")
    return path


def launch(
    data_dir: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    in_memory: bool = False,
    log: IO[bytes] | None = None,
    timeout: float = 30.0,
) -> subprocess.Popen[bytes]:
    """Start Azurite (Table service only) and return once it accepts connections.

    Data lives under ``data_dir`` so it survives a restart, unless ``in_memory``.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    command = [
        str(azurite_table_binary()),
        "--tableHost",
        host,
        "--tablePort",
        str(port),
        "--disableTelemetry",
        "--skipApiVersionCheck",
        "--silent",
    ]
    # Azurite refuses a --location together with in-memory persistence.
    command += ["--inMemoryPersistence"] if in_memory else ["--location", str(data_dir)]
    process = subprocess.Popen(command, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_listening(process, port, host, timeout, "Azurite")
    return process
