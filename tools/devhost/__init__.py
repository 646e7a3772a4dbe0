"""A local host for an Azure Functions Python v2 app (``function_app.py``), standing in for Core Tools.

``python -m devhost.worker --app-dir DIR --worker-id N [--http-port P]`` serves the app's HTTP, Service
Bus queue and timer triggers the way the Functions host does, and hands indexing and every invocation to
``azure-functions-runtime``, the language worker's code Azure runs (:mod:`devhost.language_worker`).
:func:`devhost.functions.load_functions` lets other code inspect the app's functions as it indexes them.
"""

from __future__ import annotations

from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec, TriggerKind, load_functions

__all__ = ["ConfigurationError", "FunctionSpec", "TriggerKind", "load_functions"]
