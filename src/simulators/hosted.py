"""The simulators inside the Function App, for a deployment that has no real remote services yet.

``function_app.py`` serves this under ``/api/sim`` when the app setting ``ENABLE_SIMULATORS`` is true,
and the service URLs then point at it, so a fresh ``azd up`` processes orders end to end. It does so
through two functions with different keys: the services' calls (apply and compensate) need a function
key, the controls (faults, ledger, stats, health) the host's master key, so the key the agents hold
cannot make payments fail or read every charge. :func:`is_service_path` and :func:`is_control_path` say
which function may forward which path.

The ledger is the table ``<STATE_TABLE_NAME>sim`` in the state store's account whenever a state store
is configured (always, in the app), so every instance of the app sees every effect. Without one (the
hosted app run on its own) it is a file under ``SIMULATORS_DATA_DIR``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount

from .app import SERVICE_SPECS, create_app
from .table_ledger import TableLedger

ROUTE_PREFIX = "/api/sim"
# The controls of app.create_app: one path segment each. Services' paths have two or more.
CONTROL_PATHS = frozenset({"/faults", "/ledger", "/stats", "/health"})
_SERVICE_PATH = re.compile(
    "^(?:" + "|".join(re.escape(spec.collection) for spec in SERVICE_SPECS) + r")(?:/.+)?$"
)


def _relative(path: str) -> str | None:
    """``path`` without the route prefix, or None if it is not under it."""
    if not path.lower().startswith(ROUTE_PREFIX.lower() + "/"):
        return None
    return path[len(ROUTE_PREFIX) :].rstrip("/") or "/"


def is_service_path(path: str) -> bool:
    """True if ``path`` (as the host passes it, ``/api/sim/...``) is a service's apply or compensation."""
    relative = _relative(path)
    return relative is not None and _SERVICE_PATH.match(relative) is not None


def is_control_path(path: str) -> bool:
    """True if ``path`` is one of the simulators' controls (faults, ledger, stats, health)."""
    relative = _relative(path)
    return relative is not None and relative in CONTROL_PATHS


def hosted_app(environ: Mapping[str, str] | None = None) -> Starlette:
    """The simulators mounted under ``/api/sim`` (the Functions host passes the full request path)."""
    settings = os.environ if environ is None else environ
    ledger = TableLedger.from_settings(settings)
    data_dir = None
    if ledger is None:
        data_dir = Path(settings.get("SIMULATORS_DATA_DIR") or Path(tempfile.gettempdir()) / "simulators")
    return Starlette(routes=[Mount(ROUTE_PREFIX, app=create_app(data_dir, ledger=ledger))])
