"""Serve a FunctionApp built inside a test: the runtime indexes apps from a ``function_app.py`` module, so
:func:`write_app` writes one that re-exports the test's app object."""

from __future__ import annotations

from pathlib import Path

import azure.functions as func

app: func.FunctionApp | None = None


def write_app(directory: Path, test_app: func.FunctionApp) -> None:
    """Make ``directory/function_app.py`` expose ``test_app`` (the next app indexed from it)."""
    global app
    app = test_app
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "function_app.py").write_text("from tests.devhost.inline_app import app\n", encoding="utf-8")
