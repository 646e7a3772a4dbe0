"""The simulators inside the Function App, for a deployment that has no real remote services yet.

``function_app.py`` serves this under ``/api/sim`` when the app setting ``ENABLE_SIMULATORS`` is true,
and the service URLs then point at it, so a fresh ``azd up`` processes orders end to end. It does so
through two functions with different keys: the services' calls (apply and compensate) need the app
setting ``SIMULATORS_KEY`` in the ``x-simulators-key`` header, checked here (without that setting they
are refused: the check fails closed); the controls (faults, ledger, stats, health) need the host's master
key, checked by the platform. So the key the agents hold cannot make a service fail or read the ledger.
:func:`is_service_path` and :func:`is_control_path` say which function may forward which path.

Why the app checks the services' key rather than the host: a host function key would have to be created
by the deployment on the app's host (``Microsoft.Web/sites/host/functionKeys``), a child type with no
published resource definition, which the host must be running to accept; a setting needs neither.

The ledger is the table ``<STATE_TABLE_NAME>sim`` in the state store's account whenever a state store
is configured (always, in the app), so every instance of the app sees every effect. Without one (the
hosted app run on its own) it is a file under ``SIMULATORS_DATA_DIR``.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from .app import RESOURCE_SPECS, create_app
from .table_ledger import TableLedger

ROUTE_PREFIX = "/api/sim"
SIMULATORS_KEY_HEADER = "x-simulators-key"
# The controls of app.create_app: one path segment each. Services' paths have two or more.
CONTROL_PATHS = frozenset({"/faults", "/ledger", "/stats", "/health"})
_SERVICE_PATH = re.compile(
    "^(?:" + "|".join(re.escape(spec.collection) for spec in RESOURCE_SPECS) + r")(?:/.+)?$"
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


class ServiceKeyCheck:
    """Lets a service call through only with the simulators key; other paths pass unchanged."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_service_path(scope["path"]):
            refusal = self._refusal(scope)
            if refusal is not None:
                status, message = refusal
                body = json.dumps({"error": {"code": "Unauthorized", "message": message}}).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        if not self._key:
            return 503, "the simulators are not available: SIMULATORS_KEY is not set"
        given = dict(scope["headers"]).get(SIMULATORS_KEY_HEADER.encode(), b"")
        if not hmac.compare_digest(given, self._key):
            return 401, f"a valid {SIMULATORS_KEY_HEADER} header is required"
        return None


def hosted_app(environ: Mapping[str, str] | None = None) -> ASGIApp:
    """The simulators mounted under ``/api/sim`` (the Functions host passes the full request path)."""
    settings = os.environ if environ is None else environ
    ledger = TableLedger.from_settings(settings)
    data_dir = None
    if ledger is None:
        data_dir = Path(settings.get("SIMULATORS_DATA_DIR") or Path(tempfile.gettempdir()) / "simulators")
    app = Starlette(routes=[Mount(ROUTE_PREFIX, app=create_app(data_dir, ledger=ledger))])
    return ServiceKeyCheck(app, settings.get("SIMULATORS_KEY", ""))
