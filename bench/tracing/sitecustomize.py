"""Timestamps of one order's path, for ``bench/order_path.py``: loaded by every Python process of the stack
when this folder is on ``PYTHONPATH`` and ``ORDER_PATH_TRACE`` names a file (never deployed).

It wraps, as each module is imported, the points an order passes in each process: the HTTP host handing a
request to the worker, the Service Bus host handing a message on, the runtime's invocation, the state
store's requests, the Service Bus sends and the remote calls. Each appends one line to the file:
``<time_ns> <pid> <event> <function> <detail>``, where ``function`` is the invocation it happened in.
A wrapper that cannot be put in place writes ``unwrapped`` with the reason, and order_path.py stops on it.
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
from typing import Any

TRACE_FILE = os.environ.get("ORDER_PATH_TRACE")
_function: contextvars.ContextVar[str] = contextvars.ContextVar("order_path_function", default="-")


def _record(event: str, detail: str = "-", function: str | None = None) -> None:
    _OUT.write(f"{time.time_ns()} {os.getpid()} {event} {function or _function.get()} {detail or '-'}\n")


def _wrap(owner: Any, name: str, event: str, detail: Callable[..., str], sets_function: bool = False) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        what = detail(*args, **kwargs).replace(" ", "_")
        token = _function.set(what) if sets_function else None
        _record(f"{event}>", what)
        try:
            return await original(*args, **kwargs)
        finally:
            _record(f"{event}<", what)
            if token is not None:
                _function.reset(token)

    setattr(owner, name, traced)


def _wrap_sync(
    owner: Any, name: str, event: str, detail: Callable[..., str], function: Callable[..., str]
) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def traced(*args: Any, **kwargs: Any) -> Any:
        _record(event, detail(*args, **kwargs), function(*args, **kwargs))
        return original(*args, **kwargs)

    setattr(owner, name, traced)


def _servicebus_host(module: Any) -> None:
    _wrap_sync(
        module.ServiceBusHost,
        "_dispatch",
        "received",
        lambda self, listener, receiver, message: str(message.correlation_id or "-"),
        lambda self, listener, receiver, message: listener.spec.name,
    )


def _language_worker(module: Any) -> None:
    _wrap(
        module.LanguageWorker,
        "invoke",
        "invoke",
        lambda self, function_id, *a, **k: self.functions[function_id].name,
        sets_function=True,
    )


def _http_host(module: Any) -> None:
    _wrap(module.HttpHost, "_dispatch", "http", lambda self, request: f"{request.method}:{request.url.path}")


def _table_store(module: Any) -> None:
    for method in ("create", "load", "save"):
        _wrap(module.TableStateStore, method, f"table.{method}", lambda self, *a, **k: "-")


def _servicebus(module: Any) -> None:
    _wrap(module.ServiceBusSender, "send", "send", lambda self, queue, *a, **k: queue)


def _simulators(module: Any) -> None:
    for method in ("apply", "compensate"):
        _wrap(module.Simulators, method, "service", lambda self, spec, request: spec.name)


def _httpx(module: Any) -> None:
    _wrap(module.AsyncClient, "send", "call", lambda self, request, **k: request.url.path)


PATCHES: dict[str, Callable[[Any], None]] = {
    "devhost.servicebus_host": _servicebus_host,
    "devhost.language_worker": _language_worker,
    "devhost.http_host": _http_host,
    "adapters.table_store": _table_store,
    "adapters.servicebus": _servicebus,
    "httpx": _httpx,
    "simulators.app": _simulators,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules above as usual, and wraps their functions once each has run."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name not in PATCHES:
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
                PATCHES[name](module)
            except Exception as exc:  # the code moved: say so, order_path.py stops on it
                _record("unwrapped", f"{name}:{type(exc).__name__}:{exc}".replace(" ", "_"))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if TRACE_FILE:
    _OUT = open(TRACE_FILE, "a", buffering=1)  # noqa: SIM115  # a line per write, open for the process's life
    sys.meta_path.insert(0, _Finder())
