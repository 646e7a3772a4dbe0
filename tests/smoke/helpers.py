"""Run orders-smoke and the postdeploy hook as a user would: as processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "infra" / "hooks" / "postdeploy.sh"
ORDERS_SMOKE = Path(sys.executable).parent / "orders-smoke"


def run_smoke(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``orders-smoke ARGS`` (the installed console script)."""
    return subprocess.run(
        [str(ORDERS_SMOKE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def fake_az(directory: Path, key: str = "fake-function-key", exit_code: int = 0) -> Path:
    """An ``az`` on a PATH directory that records its arguments and prints ``key``; returns the record."""
    directory.mkdir(parents=True, exist_ok=True)
    calls = directory / "az-calls.txt"
    script = directory / "az"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\necho "{key}"\nexit {exit_code}\n')
    script.chmod(0o755)
    return calls


def run_hook(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``sh infra/hooks/postdeploy.sh`` with ``env`` over a clean copy of this environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SMOKE_", "SKIP_SMOKE", "ORDERS_SMOKE"))}
    for name in ("SERVICE_API_URI", "AZURE_RESOURCE_GROUP", "AZURE_FUNCTION_APP_NAME"):
        base.pop(name, None)
    return subprocess.run(
        ["sh", str(HOOK)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, "SMOKE_PYTHON": sys.executable, **env},
        cwd=ROOT,
        check=False,
    )
