"""Bicep files as typed declarations and expressions, read with pycep-parser's grammar.

pycep's own JSON drops the difference between a string literal and a reference (``'location'`` and
``location`` both become ``"location"``), and a contract check must know which is which. So this module
walks pycep's Lark tree itself, where a quoted string and an identifier are different tokens.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lark import Token, Tree
from pycep import BicepParser

# ---- expressions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    """A literal: str, int, bool or None."""

    value: Any
    line: int


@dataclass(frozen=True)
class Ref:
    """A bare identifier: a parameter, variable, resource, module or loop variable."""

    name: str
    line: int


@dataclass(frozen=True)
class Interp:
    """A string with ``${...}`` holes: a string whose value is known only at deployment."""

    text: str
    line: int


@dataclass(frozen=True)
class Arr:
    items: tuple[Expr, ...]
    line: int


@dataclass(frozen=True)
class Pair:
    key: str
    value: Expr
    line: int


@dataclass(frozen=True)
class Obj:
    pairs: tuple[Pair, ...]
    line: int

    def get(self, key: str) -> Expr | None:
        """The value of ``key`` (case-sensitive, as Bicep compares property names)."""
        return next((p.value for p in self.pairs if p.key == key), None)


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Expr, ...]
    line: int


@dataclass(frozen=True)
class Access:
    """``base.a.b``: ``path`` is ('a', 'b'). ``rest`` holds an accessor tail this model does not follow."""

    base: Expr
    path: tuple[str, ...]
    line: int
    rest: Expr | None = None


@dataclass(frozen=True)
class Cond:
    condition: Expr
    if_true: Expr
    if_false: Expr
    line: int


@dataclass(frozen=True)
class Loop:
    """``[for x in source: body]`` (or ``[for (x, i) in ...]``); ``names`` are the loop variables."""

    names: tuple[str, ...]
    source: Expr
    body: Expr
    line: int


@dataclass(frozen=True)
class Op:
    """Any other operator: comparison, logic, arithmetic, coalesce, index, lambda."""

    kind: str
    operands: tuple[Expr, ...]
    line: int


Expr = Lit | Ref | Interp | Arr | Obj | Call | Access | Cond | Loop | Op

# ---- declarations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # string, int, bool, object, array, or a user-defined type name
    nullable: bool
    default: Expr | None
    decorators: dict[str, Expr | None]
    line: int

    @property
    def required(self) -> bool:
        """A caller must pass it: no default and not nullable."""
        return self.default is None and not self.nullable


@dataclass(frozen=True)
class Output:
    name: str
    type: str
    value: Expr
    line: int


@dataclass(frozen=True)
class Resource:
    symbol: str
    type: str  # e.g. Microsoft.Web/sites
    api_version: str
    existing: bool
    body: Expr  # the object, or a loop or condition around it
    line: int


@dataclass(frozen=True)
class Module:
    symbol: str
    path: str  # 'app/x.bicep' or 'br/public:avm/res/...:1.2.3'
    body: Expr
    line: int


@dataclass
class BicepFile:
    path: Path
    params: dict[str, Param] = field(default_factory=dict)
    variables: dict[str, Expr] = field(default_factory=dict)
    resources: dict[str, Resource] = field(default_factory=dict)
    modules: dict[str, Module] = field(default_factory=dict)
    outputs: dict[str, Output] = field(default_factory=dict)


def body_object(expr: Expr) -> Obj | None:
    """The object inside a resource or module body, through ``if (...)`` and ``[for ...]``."""
    while True:
        if isinstance(expr, Obj):
            return expr
        if isinstance(expr, Loop):
            expr = expr.body
        elif isinstance(expr, Op) and expr.kind == "deploy_condition":
            expr = expr.operands[1]
        else:
            return None


# ---- reading the tree -------------------------------------------------------------------------------

_ESCAPES = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "$": "$"}
_HOLE = re.compile(r"(?<!\\)\$\{")


def _unquote(token: str) -> str:
    text = token[1:-1]
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and text[i + 2 : i + 3] == "{":
                end = text.index("}", i)
                out.append(chr(int(text[i + 3 : end], 16)))
                i = end + 1
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _line(node: Tree[Token] | Token) -> int:
    if isinstance(node, Token):
        return node.line or 0
    return getattr(node.meta, "line", 0) if not node.meta.empty else 0


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text

    def expr(self, node: Tree[Token] | Token | None) -> Expr:
        if node is None:
            return Lit(None, 0)
        if isinstance(node, Token):
            if node.type == "QUOTED_INTERPOLATION":
                return self._string(node)
            if node.type == "INT":
                return Lit(int(node), _line(node))
            return Ref(str(node), _line(node))
        line = _line(node)
        kind = node.data
        kids = node.children
        if kind == "null":
            return Lit(None, line)
        if kind == "true":
            return Lit(True, line)
        if kind == "false":
            return Lit(False, line)
        if kind == "int_type":
            return Lit(int(str(kids[0])), line)
        if kind == "string":
            return self.expr(kids[0])
        if kind == "multi_line_string":
            return Lit(str(kids[0])[3:-3].lstrip("\r\n"), line)
        if kind == "array":
            return Arr(tuple(self.expr(k) for k in kids if k is not None), line)
        if kind == "object":
            pairs = [self._pair(k) for k in kids if isinstance(k, Tree) and k.data == "pair"]
            return Obj(tuple(pairs), line)
        if kind == "function":
            name = str(kids[0])[:-1]
            return Call(name, tuple(self.expr(k) for k in kids[1:] if k is not None), line)
        if kind == "operator":
            return self.expr(kids[0])
        if kind == "property_accessor":
            return self._access(kids[0], kids[1], line)
        if kind == "conditional":
            return Cond(self.expr(kids[0]), self.expr(kids[1]), self.expr(kids[2]), line)
        if kind == "minus" and isinstance(inner := self.expr(kids[0]), Lit) and isinstance(inner.value, int):
            return Lit(-inner.value, line)
        if kind == "loop":
            return self._loop(kids, line)
        return Op(kind, tuple(self.expr(k) for k in kids if isinstance(k, Tree | Token)), line)

    def _string(self, token: Token) -> Expr:
        raw = str(token)
        if _HOLE.search(raw):
            return Interp(raw[1:-1], _line(token))
        return Lit(_unquote(raw), _line(token))

    def _pair(self, node: Tree[Token]) -> Pair:
        key_tree, value = node.children[0], node.children[1]
        assert isinstance(key_tree, Tree)
        key = str(key_tree.children[0])
        if key.startswith("'"):
            key = _unquote(key)
        return Pair(key, self.expr(value), _line(key_tree))

    def _access(self, base: Any, tail: Any, line: int) -> Expr:
        path: list[str] = []
        rest: Expr | None = None
        while True:
            if isinstance(tail, Tree) and tail.data == "operator":
                tail = tail.children[0]
            if isinstance(tail, Tree) and tail.data == "property_accessor":
                head = tail.children[0]
                name = self._name(head)
                if name is None:
                    rest = self.expr(tail)
                    break
                path.append(name)
                tail = tail.children[1]
                continue
            name = self._name(tail)
            if name is None:
                rest = self.expr(tail)
            else:
                path.append(name)
            break
        return Access(self.expr(base), tuple(path), line, rest)

    @staticmethod
    def _name(node: Any) -> str | None:
        if isinstance(node, Tree) and node.data == "string":
            node = node.children[0]
        if isinstance(node, Token) and node.type == "STRING":
            return str(node)
        return None

    def _loop(self, kids: list[Any], line: int) -> Loop:
        head = kids[0]
        names = tuple(str(k) for k in head.children if isinstance(k, Token))
        source = next(k for k in head.children if not isinstance(k, Token) or k.type != "STRING")
        body = kids[-1]
        condition = kids[1] if len(kids) == 3 else None
        inner = self.expr(body)
        if condition is not None:
            inner = Op("deploy_condition", (self.expr(condition), inner), line)
        return Loop(names, self.expr(source), inner, line)

    def decorators(self, node: Tree[Token] | None) -> dict[str, Expr | None]:
        found: dict[str, Expr | None] = {}
        if node is None:
            return found
        for decorator in node.children:
            assert isinstance(decorator, Tree)
            name = str(decorator.children[0]).removeprefix("sys.")
            args = [k for k in decorator.children[1:] if k is not None]
            found[name] = self.expr(args[0]) if args else None
        return found

    def data_type(self, node: Tree[Token]) -> tuple[str, bool]:
        base = node.children[0]
        assert isinstance(base, Tree)
        first = base.children[0]
        name = str(first) if isinstance(first, Token) else "union"
        if any(isinstance(k, Tree) and k.data == "array_suffix" for k in node.children[1:]):
            name = "array"
        end = node.meta.end_pos if not node.meta.empty else 0
        nullable = self.text[end : end + 1] == "?"
        return name, nullable

    def body(self, node: Tree[Token]) -> Expr:
        if node.data == "deploy_condition":
            return Op(
                "deploy_condition", (self.expr(node.children[0]), self.expr(node.children[1])), _line(node)
            )
        return self.expr(node)


@functools.cache
def _parser() -> BicepParser:
    return BicepParser()


def parse_text(text: str, path: Path) -> BicepFile:
    """Parse Bicep source; raise ValueError when pycep's grammar cannot read it."""
    try:
        tree = _parser()._create_tree(text=text, file_path=None)
    except Exception as error:  # lark raises many kinds; all mean the same to a caller
        raise ValueError(f"{path}: cannot parse: {error}") from error
    reader = _Reader(text)
    result = BicepFile(path)
    for element in tree.children:
        if not isinstance(element, Tree):
            continue
        kids: list[Any] = element.children  # tokens and subtrees, by the grammar's positions
        line = _line(element)
        if element.data == "param":
            name = str(kids[1])
            type_name, nullable = reader.data_type(kids[2])
            default = reader.expr(kids[3]) if kids[3] is not None else None
            result.params[name] = Param(
                name, type_name, nullable, default, reader.decorators(kids[0]), _line(kids[1])
            )
        elif element.data == "var":
            result.variables[str(kids[1])] = reader.expr(kids[-1])
        elif element.data == "output":
            type_name, _ = reader.data_type(kids[2])
            result.outputs[str(kids[1])] = Output(str(kids[1]), type_name, reader.expr(kids[3]), line)
        elif element.data == "resource":
            type_api = _unquote(str(kids[2].children[0]))
            type_name, _, api = type_api.partition("@")
            existing = any(isinstance(k, Token) and k.type == "EXISTING" for k in kids)
            result.resources[str(kids[1])] = Resource(
                str(kids[1]), type_name, api, existing, reader.body(kids[-1]), _line(kids[1])
            )
        elif element.data == "module":
            path_text = _unquote(str(kids[2].children[0]))
            result.modules[str(kids[1])] = Module(
                str(kids[1]), path_text, reader.body(kids[-1]), _line(kids[1])
            )
    return result


def parse_file(path: Path) -> BicepFile:
    """Parse one Bicep file."""
    return parse_text(path.read_text(encoding="utf-8"), path)
