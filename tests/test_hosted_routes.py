"""function_app.py with ENABLE_SIMULATORS: two functions, keys by auth level, and no path reaches both.

The app is imported in a child process, so the setting does not change the app other tests import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from orders.catalog import SERVICES
from orders.services.client import apply_path, undo_path
from simulators.app import CONTROLS
from simulators.hosted import ROUTE_PREFIX

ROOT = Path(__file__).resolve().parents[1]

# Runs in the child: describe the simulator functions and which of them each path would reach.
PROBE = """
import json, sys
from devhost.functions import load_functions
from devhost.http_host import compile_route
from simulators.hosted import is_control_path, is_service_path

specs = {s.name: s for s in load_functions(sys.argv[1]) if s.name.startswith("simulators")}
routes = {name: compile_route(spec) for name, spec in specs.items()}
paths = json.loads(sys.argv[2])
print(json.dumps({
    "functions": {n: [s.route, s.auth_level, sorted(s.methods or [])] for n, s in specs.items()},
    "reached": {p: sorted(n for n, r in routes.items() if r.match(p.removeprefix("/api")) is not None)
                for p in paths},
    "service": {p: is_service_path(p) for p in paths},
    "control": {p: is_control_path(p) for p in paths},
}))
"""
# Every declared resource's apply and undo paths (keys with an escaped ':' and with a '/').
SERVICE_PATHS = [
    ROUTE_PREFIX + path
    for service in SERVICES
    for resource in service.resources
    for path in (
        apply_path(service, resource),
        undo_path(service, resource, "o-1:step"),
        f"{apply_path(service, resource)}/a/b/{resource.undo}",
    )
]
CONTROL_PATHS = [f"{ROUTE_PREFIX}/{control}" for control in CONTROLS]
NEITHER = [
    f"{ROUTE_PREFIX}/faults/x/y",
    f"{ROUTE_PREFIX}/{SERVICES[0].name}/other",
    f"{ROUTE_PREFIX}/nothing",
]


def probe(data_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "ENABLE_SIMULATORS": "true", "SIMULATORS_DATA_DIR": str(data_dir)}
    env.pop("STATE_STORE_CONNECTION", None)
    paths = json.dumps(SERVICE_PATHS + CONTROL_PATHS + NEITHER)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), paths], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_services_are_checked_by_the_simulators_and_controls_take_the_master_key(tmp_path: Path) -> None:
    result = probe(tmp_path)

    assert result["functions"] == {
        "simulators": ["sim/{service}/{collection}/{*rest}", "anonymous", ["POST"]],
        "simulators_control": ["sim/{control}", "admin", ["GET", "POST"]],
    }
    for path in SERVICE_PATHS:
        assert result["reached"][path] == ["simulators"], path
        assert result["service"][path] and not result["control"][path], path
    for path in CONTROL_PATHS:
        assert result["reached"][path] == ["simulators_control"], path
        assert result["control"][path] and not result["service"][path], path
    for path in NEITHER:
        # A route may match, but the function it reaches forwards nothing that is not its own.
        assert not result["service"][path] and not result["control"][path], path
