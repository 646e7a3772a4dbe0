"""Evaluate a Bicep file's expressions offline, with the template functions' documented semantics.

No Bicep CLI or Azure here, so the few expressions whose result matters and is easy to get wrong (the
parsing of SERVICE_URLS, the app settings built from catalog.json) are evaluated by this small
interpreter over the tree ``bicep_contracts.syntax`` reads. It knows only the functions and operators the
infra uses; anything else raises NotImplementedError, so a new construct is noticed rather than
guessed. Where ARM differs from Python it follows ARM: property names are case-insensitive, ``string()``
of an array is compact JSON, ``items()`` sorts by key, a conditional evaluates one branch only.

A declared resource evaluates to its body (a list of bodies for a ``[for ...]``) with its ``type`` and an
``id`` built from its name and its parent's, so that role assignments can be followed to their scope.
``guid()`` and the ids are deterministic stand-ins, not the values ARM would compute.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bicep_contracts.syntax import (
    Access,
    Arr,
    Call,
    Cond,
    Expr,
    Interp,
    Lit,
    Loop,
    Obj,
    Op,
    Ref,
    parse_file,
    parse_text,
)

_ESCAPES = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "$": "$"}
SUBSCRIPTION = "/subscriptions/00000000-0000-0000-0000-0000000000su"
RESOURCE_GROUP = f"{SUBSCRIPTION}/resourceGroups/rg-x"


class ArmError(Exception):
    """What the deployment would fail with."""


def _property(obj: Any, key: str) -> Any:
    if not isinstance(obj, dict):
        raise ArmError(f"cannot read property {key!r} of {obj!r}")
    for name, value in obj.items():
        if name.lower() == key.lower():
            return value
    raise ArmError(
        f"The language expression property '{key}' doesn't exist, available properties are "
        f"'{', '.join(obj)}'."
    )


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, dict):
        return any(k.lower() == str(item).lower() for k in container)
    return item in container  # strings: case-sensitive; arrays: equal items


def _index_of(container: Any, item: Any) -> int:
    if isinstance(container, str):
        return container.lower().find(str(item).lower())  # case-insensitive, as ARM's
    return container.index(item) if item in container else -1


def _union(*parts: Any) -> Any:
    if all(isinstance(p, dict) for p in parts):
        merged: dict[str, Any] = {}
        for part in parts:
            merged.update(part)
        return merged
    found: list[Any] = []
    for part in parts:
        found.extend(item for item in part if item not in found)
    return found


def _substring(text: str, start: int, length: int | None = None) -> str:
    if start < 0 or start > len(text) or (length is not None and (length < 0 or start + length > len(text))):
        raise ArmError(f"substring({text!r}, {start}, {length}) is out of range")
    return text[start:] if length is None else text[start : start + length]


def _split(text: str, delimiter: str | list[str]) -> list[str]:
    if isinstance(delimiter, str):
        return text.split(delimiter)
    if not delimiter:
        return [text]
    return re.split("|".join(re.escape(d) for d in sorted(delimiter, key=len, reverse=True)), text)


def guid(*parts: str) -> str:
    """A stand-in for ARM's guid(): deterministic in its parts, not ARM's value."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "-".join(parts)))


def _subscription_resource_id(type_name: str, *names: str) -> str:
    return f"{SUBSCRIPTION}/providers/{type_name}/{'/'.join(names)}"


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "string": _string,
    "json": json.loads,
    "join": lambda items, sep: sep.join(items),
    "split": _split,
    "replace": lambda text, old, new: text.replace(old, new),
    "trim": lambda text: text.strip(),
    "toLower": lambda text: text.lower(),
    "toUpper": lambda text: text.upper(),
    "take": lambda value, count: value[: max(count, 0)],
    "endsWith": lambda text, suffix: text.lower().endswith(suffix.lower()),
    "skip": lambda value, count: value[max(count, 0) :],
    "flatten": lambda arrays: [item for array in arrays for item in array],
    "guid": guid,
    "subscriptionResourceId": _subscription_resource_id,
    "first": lambda items: items[0] if items else None,
    "contains": _contains,
    "indexOf": _index_of,
    "substring": _substring,
    "length": len,
    "empty": lambda value: value is None or len(value) == 0,
    "union": _union,
    "items": lambda obj: [{"key": k, "value": obj[k]} for k in sorted(obj, key=str.lower)],
    "environment": lambda: {
        "suffixes": {"storage": "core.windows.net"},
        "authentication": {"loginEndpoint": "https://login.microsoftonline.com/"},
    },
    "tenant": lambda: {"tenantId": "00000000-0000-0000-0000-0000000000te"},
}
OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "equals": lambda a, b: a == b,
    "not_equals": lambda a, b: a != b,
    "greater_than": lambda a, b: a > b,
    "greater_than_or_equals": lambda a, b: a >= b,
    "less_than": lambda a, b: a < b,
    "less_than_or_equals": lambda a, b: a <= b,
    "add": lambda a, b: a + b,
    "substract": lambda a, b: a - b,
}


def _holes(text: str) -> list[str | Expr]:
    """An interpolated string's text (as written, between the quotes): literal parts and expressions."""
    parts: list[str | Expr] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            literal.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            parts.append("".join(literal))
            literal = []
            parts.append(
                parse_text(f"var hole = {text[i + 2 : j - 1]}\n", Path("hole.bicep")).variables["hole"]
            )
            i = j
        else:
            literal.append(text[i])
            i += 1
    parts.append("".join(literal))
    return parts


class Evaluator:
    """One Bicep file's variables and expressions, for given parameter values."""

    def __init__(self, path: Path, params: dict[str, Any]) -> None:
        self.file = parse_file(path)
        unknown = set(params) - set(self.file.params)
        if unknown:
            raise ValueError(f"{path.name} has no parameter(s) {sorted(unknown)}")
        self._variables: dict[str, Any] = {}
        self._resources: dict[str, Any] = {}
        self.params = dict(params)
        for name, param in self.file.params.items():
            if name not in self.params:
                self.params[name] = self.eval(param.default) if param.default is not None else f"<{name}>"

    def variable(self, name: str) -> Any:
        if name not in self._variables:
            self._variables[name] = self.eval(self.file.variables[name])
        return self._variables[name]

    def resource(self, symbol: str) -> Any:
        """A declared resource: its body with ``type`` and ``id``; a list of them for a loop; None for an
        ``if (...)`` whose condition is false."""
        if symbol not in self._resources:
            declared = self.file.resources[symbol]
            body = declared.body
            if isinstance(body, Op) and body.kind == "deploy_condition":
                condition, inner = body.operands
                deployed = self.eval(condition)
                self._resources[symbol] = self._resource(declared.type, inner, {}) if deployed else None
            elif isinstance(body, Loop):
                name, *index = body.names
                self._resources[symbol] = [
                    self._resource(declared.type, body.body, {name: item, **dict.fromkeys(index, i)})
                    for i, item in enumerate(self.eval(body.source))
                ]
            else:
                self._resources[symbol] = self._resource(declared.type, body, {})
        return self._resources[symbol]

    def _resource(self, type_name: str, body: Expr, scope: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, Obj):
            raise NotImplementedError(f"cannot evaluate the resource body {body!r}")
        value = self.eval(body, scope)
        parent = value.get("parent")
        if parent is not None:
            child_type = type_name.rsplit("/", 1)[1]
            resource_id = f"{parent['id']}/{child_type}/{value['name']}"
        else:
            resource_id = f"{RESOURCE_GROUP}/providers/{type_name}/{value['name']}"
        return {**value, "type": type_name, "id": resource_id}

    def eval(self, expr: Expr, scope: dict[str, Any] | None = None) -> Any:
        scope = scope or {}
        if isinstance(expr, Lit):
            return expr.value
        if isinstance(expr, Ref):
            if expr.name in scope:
                return scope[expr.name]
            if expr.name in self.params:
                return self.params[expr.name]
            if expr.name in self.file.resources:
                return self.resource(expr.name)
            return self.variable(expr.name)
        if isinstance(expr, Interp):
            return "".join(
                part if isinstance(part, str) else _string(self.eval(part, scope))
                for part in _holes(expr.text)
            )
        if isinstance(expr, Arr):
            return [self.eval(item, scope) for item in expr.items]
        if isinstance(expr, Obj):
            return {pair.key: self.eval(pair.value, scope) for pair in expr.pairs}
        if isinstance(expr, Cond):
            branch = expr.if_true if self.eval(expr.condition, scope) else expr.if_false
            return self.eval(branch, scope)
        if isinstance(expr, Loop):
            name, *index = expr.names
            return [
                self.eval(expr.body, {**scope, name: item, **dict.fromkeys(index, i)})
                for i, item in enumerate(self.eval(expr.source, scope))
            ]
        if isinstance(expr, Access) and expr.rest is None:
            value = self.eval(expr.base, scope)
            for key in expr.path:
                value = _property(value, key)
            return value
        if isinstance(expr, Call):
            return self._call(expr, scope)
        if isinstance(expr, Op):
            return self._operator(expr, scope)
        raise NotImplementedError(f"cannot evaluate {expr!r}")

    def _call(self, expr: Call, scope: dict[str, Any]) -> Any:
        if expr.name == "filter":
            items, predicate = self.eval(expr.args[0], scope), expr.args[1]
            assert isinstance(predicate, Op) and predicate.kind == "lambda_expression"
            (param,), body = predicate.operands[:-1], predicate.operands[-1]
            assert isinstance(param, Ref)
            return [item for item in items if self.eval(body, {**scope, param.name: item})]
        if expr.name == "loadJsonContent":
            (file,) = (self.eval(arg, scope) for arg in expr.args)
            return json.loads((self.file.path.parent / file).read_text(encoding="utf-8"))
        if expr.name not in FUNCTIONS:
            raise NotImplementedError(f"function {expr.name}() is not known here")
        return FUNCTIONS[expr.name](*(self.eval(arg, scope) for arg in expr.args))

    def _operator(self, expr: Op, scope: dict[str, Any]) -> Any:
        if expr.kind == "index_accessor":
            base, index = (self.eval(o, scope) for o in expr.operands)
            if isinstance(base, dict):
                return _property(base, index)
            if not 0 <= index < len(base):
                raise ArmError(f"index {index} is out of range of {base!r}")
            return base[index]
        if expr.kind == "not_op":
            return not self.eval(expr.operands[0], scope)
        if expr.kind == "and_op":
            return all(self.eval(o, scope) for o in expr.operands)
        if expr.kind == "or_op":
            return any(self.eval(o, scope) for o in expr.operands)
        if expr.kind in OPERATORS:
            left, right = (self.eval(o, scope) for o in expr.operands)
            return OPERATORS[expr.kind](left, right)
        raise NotImplementedError(f"operator {expr.kind} is not known here")
