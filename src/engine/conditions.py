"""Conditions on a step, as data: a step runs only when its condition holds on the order's document.

The document a condition reads is the one a body builder reads: ``input`` (the order's input as its
workflow's input model stored it) and ``results`` (the values earlier steps' services returned, by name).
A field is a dotted path into it; ``[]`` after a name goes through every element of a list:

- ``input.currency``: one value;
- ``input.items[].digital``: one value per item; ``each`` says whether ``any`` or ``all`` must pass
  (``all`` of no values passes, ``any`` of none fails);
- ``results.trackingNumber``: a value an earlier step returned (absent if that step was left out).

A missing value fails every test except ``absent`` (and ``!=``, which a missing value passes: it is not
equal). Conditions combine with :class:`AllOf`, :class:`AnyOf` and :class:`Not`. Every model refuses
unknown fields when its workflow is declared (see :mod:`engine.workflow`), and every ``input.`` path is
checked against the workflow's input model then, so a misspelt field fails at import, not in production.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator, Mapping
from datetime import date, time
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, JsonValue

ROOTS = ("input", "results")
_PATH = re.compile(r"^(input|results)(\.[A-Za-z_][A-Za-z0-9_-]*(\[\])?)+$")

Op = Literal["==", "!=", ">", ">=", "<", "<=", "in", "not in", "exists", "absent"]


class Declared(BaseModel):
    """A model of the declaration: frozen, and keeping unknown fields so that the workflow that holds it
    can refuse them naming itself (a step built alone cannot know its workflow's name)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def unknown(self) -> list[str]:
        """The fields given that this model does not declare."""
        return sorted(self.model_extra or {})


def refuse_unknown(model: type[BaseModel], data: Any, kind: str) -> Any:
    """``data`` unchanged, or ValueError naming the ``kind`` ("workflow", "service") and its name, and the
    fields ``model`` does not declare: pydantic's own "extra inputs" error cannot say which one it is."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - set(model.model_fields))
        if unknown:
            raise ValueError(
                f"{kind} {data.get('name')!r}: unknown field {', '.join(unknown)} "
                f"(a {kind} declares: {', '.join(model.model_fields)})"
            )
    return data


class Test(Declared):
    """One test of one field of the document: ``field op value``."""

    __test__: ClassVar[bool] = False  # not a test case, for pytest in the tests that import it

    field: str = Field(pattern=_PATH.pattern, description="a dotted path, e.g. input.items[].digital")
    op: Op
    value: JsonValue = None
    each: Literal["any", "all"] = Field(default="any", description="for a path through a list")

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether the test passes on ``document``."""
        values = [_MISSING if v is None else v for v in _values(document, self.field)]
        if "[]" not in self.field:
            return _test(self.op, values[0], self.value)
        passes = (_test(self.op, v, self.value) for v in values)
        return any(passes) if self.each == "any" else all(passes)

    def describe(self) -> str:
        """The test in words, e.g. ``any input.items[].digital != true``."""
        value = "" if self.op in ("exists", "absent") else " " + json.dumps(self.value)
        each = f"{self.each} " if "[]" in self.field else ""
        return f"{each}{self.field} {self.op}{value}"

    def fields(self) -> list[str]:
        """The paths the condition reads."""
        return [self.field]


class AllOf(Declared):
    """Every condition holds."""

    all_of: tuple[Condition, ...] = Field(min_length=1)

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether every part holds."""
        return all(c.holds(document) for c in self.all_of)

    def describe(self) -> str:
        """The condition in words."""
        return "(" + " and ".join(c.describe() for c in self.all_of) + ")"

    def fields(self) -> list[str]:
        """The paths the condition reads."""
        return [f for c in self.all_of for f in c.fields()]


class AnyOf(Declared):
    """At least one condition holds."""

    any_of: tuple[Condition, ...] = Field(min_length=1)

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether some part holds."""
        return any(c.holds(document) for c in self.any_of)

    def describe(self) -> str:
        """The condition in words."""
        return "(" + " or ".join(c.describe() for c in self.any_of) + ")"

    def fields(self) -> list[str]:
        """The paths the condition reads."""
        return [f for c in self.any_of for f in c.fields()]


class Not(Declared):
    """The condition does not hold."""

    not_: Condition = Field(alias="not")

    model_config = ConfigDict(populate_by_name=True)

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether the inner condition fails."""
        return not self.not_.holds(document)

    def describe(self) -> str:
        """The condition in words."""
        return f"not {self.not_.describe()}"

    def fields(self) -> list[str]:
        """The paths the condition reads."""
        return self.not_.fields()


Condition = Annotated[Union[Test, AllOf, AnyOf, Not], Field(union_mode="left_to_right")]  # noqa: UP007
for _model in (AllOf, AnyOf, Not):
    _model.model_rebuild()


def parts(condition: Test | AllOf | AnyOf | Not) -> Iterator[Declared]:
    """The condition and every condition inside it (to check each for unknown fields)."""
    yield condition
    inner: tuple[Any, ...] = ()
    if isinstance(condition, AllOf):
        inner = condition.all_of
    elif isinstance(condition, AnyOf):
        inner = condition.any_of
    elif isinstance(condition, Not):
        inner = (condition.not_,)
    for part in inner:
        yield from parts(part)


def tests_in(condition: Test | AllOf | AnyOf | Not | None) -> list[Test]:
    """Every test a condition makes (none for no condition), to check each against its field's type."""
    return [part for part in parts(condition) if isinstance(part, Test)] if condition is not None else []


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING: Any = _Missing()


def _part(part: str) -> tuple[str, bool]:
    """One step of a path: the field's name, and whether ``[]`` goes through its list."""
    return (part[:-2], True) if part.endswith("[]") else (part, False)


def _values(document: Any, path: str) -> list[Any]:
    """Every value at ``path``, one per list element where the path says ``[]``; a value that is missing
    (or null) is :data:`_MISSING`, and a missing list has no elements."""
    current: list[Any] = [document]
    for part in path.split("."):
        name, through = _part(part)
        found: list[Any] = []
        for value in current:
            inner = value.get(name) if isinstance(value, Mapping) else None
            if through:
                found.extend(inner if isinstance(inner, list) else [])
            else:
                found.append(_MISSING if inner is None else inner)
        current = found
    return current


def value_at(document: Mapping[str, Any], path: str) -> Any:
    """The one value at ``path`` (a path without ``[]``), or None when it is missing."""
    found = _values(document, path)
    value = found[0] if found else _MISSING
    return None if value is _MISSING else value


def _test(op: str, value: Any, expected: Any) -> bool:
    if op == "exists":
        return value is not _MISSING
    if op == "absent":
        return value is _MISSING
    if op == "!=":
        return value is _MISSING or not _equal(value, expected)
    if value is _MISSING:
        return False
    if op == "==":
        return _equal(value, expected)
    if op in ("in", "not in"):
        inside = isinstance(expected, list) and any(_equal(value, e) for e in expected)
        return inside if op == "in" else not inside
    try:
        if isinstance(value, bool) or isinstance(expected, bool):
            return False
        if op == ">":
            return bool(value > expected)
        if op == ">=":
            return bool(value >= expected)
        if op == "<":
            return bool(value < expected)
        return bool(value <= expected)
    except TypeError:
        return False  # a number compared with a text: not comparable, so the test fails


def _equal(a: Any, b: Any) -> bool:
    # JSON's true is not 1: Python's True == 1 would make a condition on a flag pass for a count.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def check_input_path(path: str, model: type[BaseModel]) -> str | None:
    """Why ``path`` (an ``input.`` path) does not name a field of ``model``, or None if it does."""
    return field_at(path, model)[0]


def field_at(path: str, model: type[BaseModel]) -> tuple[str | None, Any]:
    """Why ``path`` (``input.`` or ``results.`` and the fields below, read in ``model``) names no field of
    ``model``, or None; and the type a value at the path has (an element's, through ``[]``)."""
    current: Any = model
    root, *names = path.split(".")
    walked = root
    for part in names:
        name, through = _part(part)
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return f"{walked} has no fields", None
        fields: dict[str, Any] = {(f.alias or n): f.annotation for n, f in current.model_fields.items()}
        # A computed field is dumped with the input, so it is stored and can be read like any other.
        fields.update({(c.alias or n): c.return_type for n, c in current.model_computed_fields.items()})
        if name not in fields:
            declared = ", ".join(sorted(fields)) or "none"
            return f"{walked} declares no field {name!r} (it declares: {declared})", None
        annotation = _unwrap(fields[name])
        walked = f"{walked}.{part}"
        if through:
            if get_origin(annotation) not in (list, tuple):
                return f"{walked}: {name} is not a list, so it takes no []", None
            annotation = _unwrap(get_args(annotation)[0])
        elif get_origin(annotation) in (list, tuple):
            return f"{walked}: {name} is a list; write {name}[] to test its elements", None
        current = annotation
    return None, current


def check_value(test: Test, annotation: Any) -> str | None:
    """Why ``test`` can never pass as meant on a field declared ``annotation`` (a number compared with a
    text, a flag ordered, a text matched with a choice the field does not have), or None. A type this
    cannot tell (a model, a union of several) is not checked."""
    if test.op in ("exists", "absent"):
        return None
    kind, choices = _kind(annotation)
    if kind is None:
        return None
    if kind == "flag" and test.op in (">", ">=", "<", "<="):
        return f"{test.field} is true or false: it has no order, so {test.op} never holds"
    values = test.value if test.op in ("in", "not in") else [test.value]
    if test.op in ("in", "not in") and not isinstance(test.value, list):
        return f"{test.op} takes a list of values, not {json.dumps(test.value)}"
    for value in values if isinstance(values, list) else []:
        if _kind_of(value) != kind:
            return (
                f"{test.field} is {_WORDS[kind]}, so comparing it with {json.dumps(value)} "
                f"({_WORDS.get(_kind_of(value) or '', 'null')}) never holds as meant"
            )
        if choices and value not in choices:
            listed = ", ".join(json.dumps(c) for c in choices)
            return f"{test.field} is one of {listed}, never {json.dumps(value)}"
    return None


_WORDS = {"number": "a number", "text": "a text", "flag": "true or false"}


def _kind(annotation: Any) -> tuple[str | None, tuple[Any, ...]]:
    """What a declared type holds on the wire (number, text, flag; None when that cannot be told), and its
    choices for a ``Literal``."""
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        kinds = {_kind_of(c) for c in choices}
        return (kinds.pop(), choices) if len(kinds) == 1 else (None, ())
    if not isinstance(annotation, type):
        return None, ()
    if issubclass(annotation, bool):
        return "flag", ()
    if issubclass(annotation, (int, float, Decimal)):
        return "number", ()
    if issubclass(annotation, (str, date, time)):  # a time is stored as its ISO 8601 text
        return "text", ()
    return None, ()


def _kind_of(value: Any) -> str | None:
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return None


def _unwrap(annotation: Any) -> Any:
    """The type inside Optional[...] and Annotated[...]."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
            continue
        args = [a for a in get_args(annotation) if a is not type(None)]
        if origin in (Union, types.UnionType) and len(args) == 1:
            annotation = args[0]
            continue
        return annotation
