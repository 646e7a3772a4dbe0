"""The app's functions as the host sees them: the metadata ``azure-functions-runtime`` indexed from the app.

Like the Functions host, the devhost learns each function's trigger from the raw bindings the worker
returns (function.json's JSON), never from the app's Python objects: :func:`describe` turns one
``RpcFunctionMetadata`` into a :class:`FunctionSpec` for the trigger hosts. :func:`load_functions` indexes
an app in this process for code that only inspects it (consistency checks, tests).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from devhost.errors import ConfigurationError
from devhost.language_worker import LanguageWorker, raw_bindings
from devhost.protos import function_rpc_pb2 as protos

HTTP_TRIGGER = "httpTrigger"
HTTP_OUTPUT = "http"
SERVICE_BUS_TRIGGER = "serviceBusTrigger"
TIMER_TRIGGER = "timerTrigger"

_SETTING_EXPRESSION = re.compile(r"%([^%]+)%")
_indexed: dict[Path, list[FunctionSpec]] = {}


class TriggerKind(StrEnum):
    """The trigger types the devhost serves, by their function.json binding type."""

    HTTP = HTTP_TRIGGER
    SERVICE_BUS = SERVICE_BUS_TRIGGER
    TIMER = TIMER_TRIGGER
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class BindingInfo:
    """A non-trigger binding of a function (its argument name and function.json type)."""

    name: str
    type: str
    direction: str


@dataclass(frozen=True)
class FunctionSpec:
    """One function: its id in the runtime, its trigger and the trigger's settings.

    Values are as the app declares them: ``%SETTING%`` expressions in ``queue_name`` or ``schedule``
    are not resolved here (see :func:`resolve_setting_expressions`).
    """

    name: str
    function_id: str
    trigger: TriggerKind
    trigger_type: str
    arg_name: str
    binding: Mapping[str, Any] = field(repr=False)
    # HTTP trigger
    route: str | None = None
    methods: tuple[str, ...] | None = None  # None: every method
    auth_level: str | None = None
    # Service Bus trigger
    queue_name: str | None = None
    topic_name: str | None = None
    subscription_name: str | None = None
    connection: str | None = None
    cardinality: str = "one"
    is_sessions_enabled: bool = False
    # Timer trigger
    schedule: str | None = None
    run_on_startup: bool = False
    other_bindings: tuple[BindingInfo, ...] = ()


def resolve_setting_expressions(value: str, environ: Mapping[str, str], what: str) -> str:
    """Replace each ``%NAME%`` in ``value`` with the app setting (environment variable) ``NAME``.

    Raises ConfigurationError naming every missing setting; ``what`` says where the value came from.
    """
    missing = [name for name in _SETTING_EXPRESSION.findall(value) if name not in environ]
    if missing:
        names = ", ".join(sorted(set(missing)))
        raise ConfigurationError(f"{what}: {value!r} refers to app setting(s) that are not set: {names}")
    return _SETTING_EXPRESSION.sub(lambda m: environ[m.group(1)], value)


def _trigger_kind(trigger_type: str) -> TriggerKind:
    try:
        return TriggerKind(trigger_type)
    except ValueError:
        return TriggerKind.UNSUPPORTED


def _lower_keys(binding: Mapping[str, Any]) -> dict[str, Any]:
    # The host reads function.json keys case-insensitively.
    return {str(key).lower(): value for key, value in binding.items()}


def describe_bindings(name: str, function_id: str, bindings: Sequence[Mapping[str, Any]]) -> FunctionSpec:
    """A :class:`FunctionSpec` from a function's bindings in function.json form."""
    trigger = next(
        (b for b in bindings if str(b.get("type", "")).endswith("Trigger") and _direction(b) == "in"), None
    )
    if trigger is None:
        raise ConfigurationError(f"function {name} has no trigger binding")
    trigger_type = str(trigger["type"])
    kind = _trigger_kind(trigger_type)
    keys = _lower_keys(trigger)
    others = tuple(
        BindingInfo(name=str(b.get("name")), type=str(b.get("type")), direction=_direction(b))
        for b in bindings
        if b is not trigger
        # The HTTP output bound to the return value is what the HTTP host produces from the result.
        and not (kind is TriggerKind.HTTP and b.get("type") == HTTP_OUTPUT and b.get("name") == "$return")
    )
    methods = keys.get("methods")
    return FunctionSpec(
        name=name,
        function_id=function_id,
        trigger=kind,
        trigger_type=trigger_type,
        arg_name=str(trigger["name"]),
        binding=dict(trigger),
        route=keys.get("route") if kind is TriggerKind.HTTP else None,
        methods=tuple(str(m).upper() for m in methods) if methods else None,
        auth_level=str(keys["authlevel"]).lower() if keys.get("authlevel") else None,
        queue_name=keys.get("queuename"),
        topic_name=keys.get("topicname"),
        subscription_name=keys.get("subscriptionname"),
        connection=keys.get("connection"),
        cardinality=str(keys.get("cardinality") or "one").lower(),
        is_sessions_enabled=bool(keys.get("issessionsenabled", False)),
        schedule=keys.get("schedule"),
        run_on_startup=bool(keys.get("runonstartup", False)),
        other_bindings=others,
    )


def _direction(binding: Mapping[str, Any]) -> str:
    return str(binding.get("direction", "in")).lower()


def describe(metadata: protos.RpcFunctionMetadata) -> FunctionSpec:
    """The :class:`FunctionSpec` of one function the runtime indexed."""
    return describe_bindings(metadata.name, metadata.function_id, raw_bindings(metadata))


async def index(app_dir: str | Path) -> list[FunctionSpec]:
    """Index the app with ``azure-functions-runtime`` in this process and describe its functions."""
    worker = LanguageWorker(Path(app_dir))
    try:
        return [describe(metadata) for metadata in await worker.start()]
    finally:
        worker.stop()


def load_functions(app_dir: str | Path) -> list[FunctionSpec]:
    """Every function ``app_dir/function_app.py`` registers, as the runtime indexes it, in declaration order.

    Indexed once per directory and process (``FunctionApp.get_functions()`` may run only once per app
    object). Raises ConfigurationError if the directory has no ``function_app.py`` or the runtime cannot
    index it (the message carries the runtime's report).
    """
    directory = Path(app_dir).resolve()
    specs = _indexed.get(directory)
    if specs is None:
        specs = asyncio.run(index(directory))
        _indexed[directory] = specs
    return list(specs)
