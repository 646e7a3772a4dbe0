"""Replacing a move of :mod:`engine.transitions` (or what a kind of wait of :mod:`engine.waits` computes for
the moves) in a test: a planted bug (planted.py), a regression put back (regressions.py).

engine.transitions is a package: each move lives in the module of its family, and the modules that call it
took it by name (``from .forward import _dispatch_forward``), as the package's face did for the public
ones, which the engine's other modules call there (``transitions.apply_reply``). A replacement set on one
module alone would miss the calls made through the others. :func:`replace` sets it wherever the two
packages bind the move: what setting it on the single module transitions.py once did.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

import pytest

from engine import transitions, waits


def modules() -> list[ModuleType]:
    """The faces of engine.transitions and engine.waits, and each of their modules."""
    found: list[ModuleType] = []
    for package in (transitions, waits):
        inside = pkgutil.iter_modules(package.__path__)
        found += [package, *(importlib.import_module(f"{package.__name__}.{info.name}") for info in inside)]
    return found


def binding(name: str, original: Any) -> list[ModuleType]:
    """The modules of the two packages where ``name`` is ``original``."""
    return [module for module in modules() if vars(module).get(name) is original]


def replace(mp: pytest.MonkeyPatch, home: ModuleType, name: str, replacement: Any) -> None:
    """Put ``replacement`` in place of ``name``, defined in ``home``, in every module of engine.transitions
    and engine.waits that binds it (a face too, when it shows it): every call of the move then reaches the
    replacement."""
    original = getattr(home, name)
    defined = getattr(original, "__module__", home.__name__)
    assert defined == home.__name__, f"{name} is defined in {defined}, not in {home.__name__}"
    for module in binding(name, original):
        mp.setattr(module, name, replacement)
