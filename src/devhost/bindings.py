"""Read an Azure Functions Python v2 app: import ``function_app.py`` and describe each function's trigger.

The app is imported unchanged, the way the Python worker does it: the app directory goes on
``sys.path`` and the module is imported as ``function_app``. ``FunctionApp.get_functions()`` may be
called only once per app object (a second call fails its duplicate-name check), so the result is cached
per app object.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any

from azure.functions.decorators.constants import (
    HTTP_OUTPUT,
    HTTP_TRIGGER,
    SERVICE_BUS_TRIGGER,
    TIMER_TRIGGER,
)
from azure.functions.decorators.core import Binding
from azure.functions.decorators.function_app import Function, FunctionRegister

from devhost.errors import ConfigurationError

SCRIPT_FILE = "function_app.py"
MODULE_NAME = "function_app"
# The Python worker hands an invocation context to a parameter with this name.
CONTEXT_PARAMETER = "context"

_SETTING_EXPRESSION = re.compile(r"%([^%]+)%")
_functions_cache: weakref.WeakKeyDictionary[FunctionRegister, list[Function]] = weakref.WeakKeyDictionary()


class TriggerKind(StrEnum):
    """The trigger types the worker serves, by their function.json binding type."""

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
    """One function of the app: its trigger, how to call it, and its trigger's settings.

    Values are as the app declares them: ``%SETTING%`` expressions in ``queue_name`` or ``schedule``
    are not resolved here (see :func:`resolve_setting_expressions`).
    """

    name: str
    trigger: TriggerKind
    trigger_type: str
    arg_name: str
    func: Callable[..., Any] = field(repr=False)
    is_async: bool
    pass_context: bool
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


def import_app_module(app_dir: str | Path) -> ModuleType:
    """Import ``DIR/function_app.py`` as the module ``function_app``, with DIR on ``sys.path``.

    Reuses the module if this file is already imported; a ``function_app`` from another directory is
    replaced.
    """
    directory = Path(app_dir).resolve()
    script = directory / SCRIPT_FILE
    if not script.is_file():
        raise ConfigurationError(f"{script} does not exist: --app-dir must hold the app's {SCRIPT_FILE}")
    # First on the path, so this directory's function_app (and its packages) win over another app's.
    if str(directory) in sys.path:
        sys.path.remove(str(directory))
    sys.path.insert(0, str(directory))
    existing = sys.modules.get(MODULE_NAME)
    if existing is not None:
        existing_file = getattr(existing, "__file__", None)
        if existing_file and Path(existing_file).resolve() == script:
            return existing
        del sys.modules[MODULE_NAME]
    return importlib.import_module(MODULE_NAME)


def find_function_app(module: ModuleType) -> FunctionRegister:
    """The single ``FunctionApp`` (any ``FunctionRegister``) object among the module's attributes."""
    found: dict[int, FunctionRegister] = {}
    for value in vars(module).values():
        if isinstance(value, FunctionRegister):
            found[id(value)] = value
    if not found:
        raise ConfigurationError(
            f"{module.__file__}: no azure.functions.FunctionApp object found at module level "
            "(expected e.g. `app = func.FunctionApp()`)"
        )
    if len(found) > 1:
        raise ConfigurationError(
            f"{module.__file__}: more than one FunctionApp object found; keep exactly one"
        )
    return next(iter(found.values()))


def app_functions(app: FunctionRegister) -> list[Function]:
    """``app.get_functions()``, called once per app object and cached."""
    functions = _functions_cache.get(app)
    if functions is None:
        functions = list(app.get_functions())
        _functions_cache[app] = functions
    return functions


def _enum_text(value: Any) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


def _direction_text(binding: Binding) -> str:
    direction = getattr(binding, "_direction", None)
    return direction.name.lower() if isinstance(direction, Enum) else str(direction)


def _binding_dict(binding: Binding) -> dict[str, Any]:
    """The binding as function.json shows it (enums as their names)."""
    raw = binding.get_dict_repr()
    return {key: (str(value) if isinstance(value, Enum) else value) for key, value in raw.items()}


def _trigger_kind(trigger_type: str) -> TriggerKind:
    try:
        return TriggerKind(trigger_type)
    except ValueError:
        return TriggerKind.UNSUPPORTED


def describe_function(function: Function) -> FunctionSpec:
    """Turn one ``azure.functions`` Function object into a :class:`FunctionSpec`."""
    trigger = function.get_trigger()
    if trigger is None:  # get_functions() already refuses this; kept for direct callers
        raise ConfigurationError(f"function {function.get_function_name()} has no trigger")
    user_function = function.get_user_function()
    trigger_type = str(trigger.type)
    kind = _trigger_kind(trigger_type)
    parameters = inspect.signature(user_function).parameters
    binding_names = {binding.name for binding in function.get_bindings()}
    others = tuple(
        BindingInfo(name=binding.name, type=str(binding.type), direction=_direction_text(binding))
        for binding in function.get_bindings()
        if binding is not trigger
        # The HTTP output bound to the return value is what the HTTP host produces from the result.
        and not (kind is TriggerKind.HTTP and binding.type == HTTP_OUTPUT and binding.name == "$return")
    )
    methods = getattr(trigger, "methods", None)
    cardinality = getattr(trigger, "cardinality", None)
    return FunctionSpec(
        name=function.get_function_name() or user_function.__name__,
        trigger=kind,
        trigger_type=trigger_type,
        arg_name=trigger.name,
        func=user_function,
        is_async=inspect.iscoroutinefunction(user_function),
        pass_context=CONTEXT_PARAMETER in parameters and CONTEXT_PARAMETER not in binding_names,
        binding=_binding_dict(trigger),
        route=getattr(trigger, "route", None) if kind is TriggerKind.HTTP else None,
        methods=tuple(_enum_text(m).upper() for m in methods) if methods else None,
        auth_level=_enum_text(auth) if (auth := getattr(trigger, "auth_level", None)) else None,
        queue_name=getattr(trigger, "queue_name", None),
        topic_name=getattr(trigger, "topic_name", None),
        subscription_name=getattr(trigger, "subscription_name", None),
        connection=getattr(trigger, "connection", None),
        cardinality=_enum_text(cardinality).lower() if cardinality else "one",
        is_sessions_enabled=bool(getattr(trigger, "is_sessions_enabled", False)),
        schedule=getattr(trigger, "schedule", None),
        run_on_startup=bool(getattr(trigger, "run_on_startup", False)),
        other_bindings=others,
    )


def load_function_app(app_dir: str | Path) -> FunctionRegister:
    """Import the app in ``app_dir`` and return its FunctionApp object."""
    return find_function_app(import_app_module(app_dir))


def load_functions(app_dir: str | Path) -> list[FunctionSpec]:
    """Import ``app_dir/function_app.py`` and describe every function it registers, in declaration order.

    Raises ConfigurationError if the directory has no ``function_app.py`` or it holds no (or several)
    FunctionApp objects; exceptions raised while importing the app propagate unchanged.
    """
    app = load_function_app(app_dir)
    return [describe_function(function) for function in app_functions(app)]
