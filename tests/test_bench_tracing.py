"""The points ``bench/order_path.py`` times are still where its hook looks for them.

The hook (``bench/tracing/sitecustomize.py``) wraps named methods of the stack's modules when they are
imported; a renamed method, or one that changed between sync and async, would make the benchmark stop
(it reports the wrapper it could not put in place) long after the change that broke it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HOOK = Path(__file__).resolve().parents[1] / "bench" / "tracing" / "sitecustomize.py"


def _hook() -> ModuleType:
    # Loaded under another name, with ORDER_PATH_TRACE unset: it defines its points and wraps nothing.
    spec = importlib.util.spec_from_file_location("order_path_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


POINTS = _hook().POINTS


@pytest.mark.parametrize("point", POINTS, ids=[f"{p.module}.{p.owner}.{p.method}" for p in POINTS])
def test_every_point_the_order_path_times_exists(point: Any) -> None:
    module = importlib.import_module(point.module)
    owner = getattr(module, point.owner)
    method = getattr(owner, point.method)
    assert inspect.iscoroutinefunction(method) == point.is_async
