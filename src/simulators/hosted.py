"""The simulators inside the Function App, for a deployment that has no real remote services yet.

``function_app.py`` serves this under ``/api/sim`` when the app setting ``ENABLE_SIMULATORS`` is true,
and the service URLs then point at it, so a fresh ``azd up`` processes orders end to end. The ledger
lives on the instance's local disk: a demo, not a record.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount

from .app import create_app

ROUTE_PREFIX = "/api/sim"


def hosted_app() -> Starlette:
    """The simulators mounted under ``/api/sim`` (the Functions host passes the full request path)."""
    data_dir = Path(os.environ.get("SIMULATORS_DATA_DIR") or Path(tempfile.gettempdir()) / "simulators")
    return Starlette(routes=[Mount(ROUTE_PREFIX, app=create_app(data_dir))])
