"""A local runner for an Azure Functions Python v2 app (``function_app.py``), standing in for Core Tools.

``python -m devhost.worker --app-dir DIR --worker-id N [--http-port P]`` imports the app unchanged and
serves its HTTP, Service Bus queue and timer triggers the way the Functions host does.
:func:`devhost.bindings.load_functions` lets other code inspect the app's functions.
"""

from __future__ import annotations

from devhost.bindings import FunctionSpec, TriggerKind, load_functions
from devhost.errors import ConfigurationError

__all__ = ["ConfigurationError", "FunctionSpec", "TriggerKind", "load_functions"]
