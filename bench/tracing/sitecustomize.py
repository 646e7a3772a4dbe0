"""Timestamps of one order's path, for ``bench/order_path.py``: loaded by every Python process of the stack
when this folder is on ``PYTHONPATH`` and ``ORDER_PATH_TRACE`` names a file (never deployed).

It wraps, as each module is imported, the points an order passes in each process: the HTTP host handing a
request to the worker, the Service Bus host handing a message on, the runtime's invocation, the state
store's requests, the Service Bus sends, the remote calls and the simulators' handling of them (the
:data:`POINTS`). Each appends one line to the file: ``<time_ns> <pid> <event> <function> <detail>``, where
``function`` is the invocation it happened in. A wrapper that cannot be put in place writes ``unwrapped``
with the reason, and order_path.py stops on it; ``tests/test_bench_tracing.py`` checks every point is
where it is looked for.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.abc
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TRACE_FILE = os.environ.get("ORDER_PATH_TRACE")
_function: contextvars.ContextVar[str] = contextvars.ContextVar("order_path_function", default="-")


def _record(event: str, detail: str = "-", function: str | None = None) -> None:
    _OUT.write(f"{time.time_ns()} {os.getpid()} {event} {function or _function.get()} {detail or '-'}\n")


@dataclass(frozen=True)
class Point:
    """One function an order passes: where it is, the event it records and what the event names."""

    module: str
    owner: str  # the class in ``module``
    method: str
    event: str
    detail: Callable[..., str]  # from the call's arguments: what the event is about
    function: Callable[..., str] | None = None  # a synchronous point: the function it dispatches to
    sets_function: bool = False  # the events inside this call happen in the function it names
    is_async: bool = True


def _nothing(*args: Any, **kwargs: Any) -> str:
    return "-"


POINTS: tuple[Point, ...] = (
    Point(
        "devhost.servicebus_host",
        "ServiceBusHost",
        "_dispatch",
        "received",
        lambda self, listener, receiver, message: str(message.correlation_id or "-"),
        function=lambda self, listener, receiver, message: listener.spec.name,
        is_async=False,
    ),
    Point(
        "devhost.language_worker",
        "LanguageWorker",
        "invoke",
        "invoke",
        lambda self, function_id, *a, **k: self.functions[function_id].name,
        sets_function=True,
    ),
    Point("devhost.http_host", "HttpHost", "_dispatch", "http", lambda self, r: f"{r.method}:{r.url.path}"),
    *(
        Point("adapters.table_store", "TableStateStore", m, f"table.{m}", _nothing)
        for m in ("create", "load", "save")
    ),
    Point("adapters.servicebus", "ServiceBusSender", "send", "send", lambda self, queue, *a, **k: queue),
    # The Agent's call as its client makes it (the body's encoding and its span included: a few hundredths
    # of a millisecond); below it aiohttp's session also carries the table requests.
    Point(
        "orders.services.client", "RemoteServices", "_call", "call", lambda self, service, path, *a, **k: path
    ),
    *(
        Point("simulators.app", "Simulators", m, "service", lambda self, spec, r: spec.name)
        for m in ("apply", "compensate")
    ),
)
MODULES = frozenset(point.module for point in POINTS)


def _wrap(owner: Any, point: Point) -> None:
    original = getattr(owner, point.method)

    @functools.wraps(original)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        what = point.detail(*args, **kwargs).replace(" ", "_")
        token = _function.set(what) if point.sets_function else None
        _record(f"{point.event}>", what)
        try:
            return await original(*args, **kwargs)
        finally:
            _record(f"{point.event}<", what)
            if token is not None:
                _function.reset(token)

    @functools.wraps(original)
    def dispatched(*args: Any, **kwargs: Any) -> Any:
        assert point.function is not None
        _record(point.event, point.detail(*args, **kwargs), point.function(*args, **kwargs))
        return original(*args, **kwargs)

    setattr(owner, point.method, traced if point.is_async else dispatched)


def install(name: str, module: Any) -> None:
    """Wrap the points of module ``name`` (just executed)."""
    for point in POINTS:
        if point.module == name:
            _wrap(getattr(module, point.owner), point)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules above as usual, and wraps their functions once each has run."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name not in MODULES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            try:
                install(name, module)
            except Exception as exc:  # the code moved: say so, order_path.py stops on it
                _record("unwrapped", f"{name}:{type(exc).__name__}:{exc}".replace(" ", "_"))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if TRACE_FILE:
    _OUT = open(TRACE_FILE, "a", buffering=1)  # noqa: SIM115  # a line per write, open for the process's life
    sys.meta_path.insert(0, _Finder())
