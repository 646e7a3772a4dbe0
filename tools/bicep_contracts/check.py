"""Check every module call and resource in a Bicep tree against the pinned contract of what it names.

Reported, as ``bicep build`` would refuse them (names compared case-sensitively, as Bicep does):
an unknown parameter or property, a missing required one, a literal of the wrong type or outside the
allowed values or bounds, a read-only property set, a ``module.outputs.X`` the module does not declare,
a registry module version or resource API version with no pinned contract, and, within each file, a
parameter default or an output value that does not fit its declared type.

Values are followed through variables, conditions and parameters: a parameter carries its declared type
and ``@allowed`` values, so a parameter whose allowed values the module does not accept is reported too.
``loadJsonContent('<file>')`` is read (relative to the Bicep file) and its content checked like literals;
property and index accesses into known objects and arrays are followed, ``[for ...]`` over a known array
(or ``items()`` of a known object) is checked item by item, and each part of ``union(...)`` is checked.
A file that cannot be read and a property the JSON does not have are reported. Whatever is only known at
deployment (function results, interpolated strings) is checked by type only.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contracts import (
    AnyType,
    ArrayType,
    BoolType,
    DiscriminatedType,
    IntType,
    ModuleContract,
    ObjectType,
    Property,
    RefType,
    ResourceContract,
    StringType,
    TypeNode,
    UnionType,
    load_module,
    load_resource,
    module_file,
    resource_file,
)
from .syntax import (
    Access,
    Arr,
    BicepFile,
    Call,
    Cond,
    Expr,
    Interp,
    Lit,
    Loop,
    Obj,
    Op,
    Pair,
    Param,
    Ref,
    body_object,
    parse_file,
)
from .usage import registry_reference


@dataclass(frozen=True)
class Finding:
    """One mistake, with the file and line where it is."""

    file: Path
    line: int
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.where}: {self.message}"


@dataclass(frozen=True)
class Opaque:
    """A value known only at deployment: its type when known, and its possible values when a parameter
    restricts them with ``@allowed``."""

    kind: str | None
    allowed: tuple[object, ...] | None = None


# Return types of the Bicep functions this tree may use; others are left unchecked, as are those whose type
# is their arguments' (concat, skip and take give a string of strings and an array of arrays).
_FUNCTION_KINDS = {
    **dict.fromkeys(
        (
            "string",
            "format",
            "toLower",
            "toUpper",
            "trim",
            "uniqueString",
            "guid",
            "newGuid",
            "utcNow",
            "substring",
            "replace",
            "resourceId",
            "subscriptionResourceId",
            "tenantResourceId",
            "extensionResourceId",
            "base64",
            "uri",
            "dataUri",
            "padLeft",
            "join",
        ),
        "string",
    ),
    **dict.fromkeys(("int", "length", "indexOf", "lastIndexOf", "min", "max", "add", "sub"), "int"),
    **dict.fromkeys(
        ("bool", "empty", "contains", "startsWith", "endsWith", "equals", "and", "or", "not"), "bool"
    ),
    **dict.fromkeys(("array", "split", "range", "items", "filter", "map", "flatten"), "array"),
    **dict.fromkeys(("resourceGroup", "subscription", "tenant", "environment", "deployment"), "object"),
}
_OPERATOR_KINDS = {
    **dict.fromkeys(
        (
            "greater_than_or_equals",
            "greater_than",
            "less_than_or_equals",
            "less_than",
            "equals",
            "not_equals",
            "equals_case_insens",
            "not_equals_case_insens",
            "and_op",
            "or_op",
            "not_op",
        ),
        "bool",
    ),
    **dict.fromkeys(("add", "divide", "minus", "modulo", "multiply", "substract"), "int"),
}
_DECLARED_KINDS = {"string": "string", "int": "int", "bool": "bool", "object": "object", "array": "array"}
# Keys of a module or resource body that are Bicep keywords, not part of the contract.
_MODULE_KEYWORDS = {"name", "params", "scope", "dependsOn"}
_RESOURCE_KEYWORDS = {"scope", "parent", "dependsOn"}
_EXISTING_KEYS = {"name", "scope", "parent"}


def _kind(node: TypeNode) -> str:
    if isinstance(node, StringType):
        return "string"
    if isinstance(node, IntType):
        return "int"
    if isinstance(node, BoolType):
        return "bool"
    if isinstance(node, ArrayType):
        return "array"
    if isinstance(node, ObjectType | DiscriminatedType):
        return "object"
    return "any"


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _describe(value: object) -> str:
    return (
        "null"
        if value is None
        else repr(value).replace('"', "'")
        if not isinstance(value, bool)
        else str(value).lower()
    )


class Contracts:
    """The pinned contracts in one directory, read on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._modules: dict[tuple[str, str], ModuleContract | None] = {}
        self._resources: dict[str, ResourceContract | None] = {}

    def module(self, module: str, version: str) -> ModuleContract | None:
        key = (module, version)
        if key not in self._modules:
            path = module_file(self.directory, module, version)
            self._modules[key] = load_module(path) if path.is_file() else None
        return self._modules[key]

    def resource(self, type_name: str, api_version: str) -> ResourceContract | None:
        key = f"{type_name}@{api_version}".lower()
        if key not in self._resources:
            path = resource_file(self.directory, type_name, api_version)
            self._resources[key] = load_resource(path) if path.is_file() else None
        return self._resources[key]


def local_contract(parsed: BicepFile) -> ModuleContract:
    """The contract of a module that is a local Bicep file: its parameters and outputs as declared."""
    return ModuleContract(
        module=str(parsed.path),
        version="local",
        sources=[],
        parameters={
            name: Property(type=_param_type(param), required=param.required, nullable=param.nullable)
            for name, param in parsed.params.items()
        },
        outputs={name: _declared_type(output.type) for name, output in parsed.outputs.items()},
    )


def _declared_type(type_name: str, allowed: list[object] | None = None) -> TypeNode:
    kind = _DECLARED_KINDS.get(type_name)
    if kind == "string":
        return StringType(kind="string", allowed=[str(v) for v in allowed] if allowed else None)
    if kind == "int":
        return IntType(kind="int", allowed=[int(str(v)) for v in allowed] if allowed else None)
    if kind == "bool":
        return BoolType(kind="bool")
    if kind == "object":
        return ObjectType(kind="object")
    if kind == "array":
        return ArrayType(kind="array")
    return AnyType(kind="any")


def _literal_list(expr: Expr | None) -> list[object] | None:
    if isinstance(expr, Arr) and all(isinstance(item, Lit) for item in expr.items):
        return [item.value for item in expr.items if isinstance(item, Lit)]
    return None


def _param_type(param: Param) -> TypeNode:
    node = _declared_type(param.type, _literal_list(param.decorators.get("allowed")))
    bounds = {
        key: value.value
        for key, value in param.decorators.items()
        if key in ("minValue", "maxValue", "minLength", "maxLength") and isinstance(value, Lit)
    }
    if isinstance(node, IntType):
        return node.model_copy(
            update={"min_value": bounds.get("minValue"), "max_value": bounds.get("maxValue")}
        )
    if isinstance(node, StringType):
        return node.model_copy(
            update={"min_length": bounds.get("minLength"), "max_length": bounds.get("maxLength")}
        )
    return node


class FileChecker:
    """Checks one Bicep file's module calls, resources and module output references."""

    def __init__(self, parsed: BicepFile, contracts: Contracts, locals_: dict[Path, BicepFile]) -> None:
        self.parsed = parsed
        self.contracts = contracts
        self.locals = locals_
        self.findings: list[Finding] = []
        self.module_contracts: dict[str, ModuleContract | None] = {}
        self._types: dict[str, TypeNode] = {}
        self._resolving: set[str] = set()
        # loadJsonContent files by path: their content, or why they cannot be read.
        self._json: dict[Path, Any] = {}

    # ---- entry points ---------------------------------------------------------------------------------
    def run(self) -> list[Finding]:
        """Every finding in the file."""
        for symbol, module in self.parsed.modules.items():
            self.module_contracts[symbol] = self._module_contract(symbol, module.path, module.line)
        for symbol, module in self.parsed.modules.items():
            contract = self.module_contracts[symbol]
            if contract is not None:
                self._check_module(symbol, module.body, contract)
        for resource in self.parsed.resources.values():
            self._check_resource(
                resource.symbol,
                resource.type,
                resource.api_version,
                resource.existing,
                resource.body,
                resource.line,
            )
        self._types = {}
        for name, param in self.parsed.params.items():
            if param.default is not None:
                self._check(param.default, _param_type(param), f"param {name} default")
        for name, output in self.parsed.outputs.items():
            self._check(output.value, _declared_type(output.type), f"output {name}")
        for expr in self._all_expressions():
            self._check_output_references(expr)
            self._check_json_references(expr)
        return self.findings

    def _report(self, line: int, where: str, message: str) -> None:
        self.findings.append(Finding(self.parsed.path, line, where, message))

    def _module_contract(self, symbol: str, path: str, line: int) -> ModuleContract | None:
        ref = registry_reference(path)
        if ref:
            contract = self.contracts.module(*ref)
            if contract is None:
                self._report(
                    line,
                    f"module {symbol}",
                    f"no pinned contract for {ref[0]}:{ref[1]} (run `make refresh-contracts` after a bump)",
                )
            return contract
        if path.startswith("br:") or path.startswith("br/") or path.startswith("ts:"):
            self._report(
                line,
                f"module {symbol}",
                f"registry reference {path!r} is not a public module this check knows",
            )
            return None
        target = (self.parsed.path.parent / path).resolve()
        parsed = self.locals.get(target)
        if parsed is None:
            self._report(line, f"module {symbol}", f"local module {path} not found")
            return None
        return local_contract(parsed)

    def _check_module(self, symbol: str, body: Expr, contract: ModuleContract) -> None:
        obj = body_object(body)
        version = "" if contract.version == "local" else f":{contract.version}"
        label = f"module {symbol} ({contract.module}{version})"
        if obj is None:
            return
        for pair in obj.pairs:
            if pair.key not in _MODULE_KEYWORDS:
                self._report(pair.line, label, f"unknown module property {pair.key!r}")
        params = obj.get("params")
        self._types = contract.types
        node = ObjectType(kind="object", properties=contract.parameters)
        if params is None:
            missing = [name for name, prop in contract.parameters.items() if prop.required]
            if missing:
                self._report(
                    obj.line, label, f"missing required parameter(s) {', '.join(map(repr, missing))}"
                )
            return
        self._check(params, node, f"{label} params", noun="parameter")

    def _check_resource(
        self, symbol: str, type_name: str, api: str, existing: bool, body: Expr, line: int
    ) -> None:
        label = f"resource {symbol} ({type_name}@{api})"
        contract = self.contracts.resource(type_name, api)
        if contract is None:
            self._report(
                line,
                label,
                "no pinned definition of this resource type and API version (run `make refresh-contracts`)",
            )
            return
        if contract.resource != type_name:
            self._report(line, label, f"the published type is spelled {contract.resource!r}")
        obj = body_object(body)
        if obj is None:
            return
        self._types = contract.types
        if existing:
            for pair in obj.pairs:
                if pair.key not in _EXISTING_KEYS:
                    self._report(
                        pair.line,
                        label,
                        f"an existing resource takes only name, scope and parent, not {pair.key!r}",
                    )
            if obj.get("name") is None:
                self._report(obj.line, label, "missing required property 'name'")
            return
        self._check(obj, contract.body, label, keywords=_RESOURCE_KEYWORDS)

    # ---- values against types ---------------------------------------------------------------------------
    def _deref(self, node: TypeNode) -> TypeNode:
        seen = 0
        while isinstance(node, RefType):
            node = self._types.get(node.ref, AnyType(kind="any"))
            seen += 1
            if seen > 50:
                return AnyType(kind="any")
        return node

    def _resolve(self, expr: Expr) -> Expr | Opaque:
        """Follow variables, JSON content and accesses into known values; give parameters and other
        deploy-time values as Opaque. ``union(...)`` of parts not all known stays a Call."""
        if isinstance(expr, Ref):
            if expr.name in self.parsed.variables and expr.name not in self._resolving:
                self._resolving.add(expr.name)
                try:
                    return self._resolve(self.parsed.variables[expr.name])
                finally:
                    self._resolving.discard(expr.name)
            param = self.parsed.params.get(expr.name)
            if param is not None:
                allowed = _literal_list(param.decorators.get("allowed"))
                return Opaque(_DECLARED_KINDS.get(param.type), tuple(allowed) if allowed else None)
            if expr.name in self.parsed.resources or expr.name in self.parsed.modules:
                return Opaque("object")
            return Opaque(None)
        if isinstance(expr, Interp):
            return Opaque("string")
        if isinstance(expr, Call):
            return self._resolve_call(expr)
        if isinstance(expr, Op):
            if expr.kind == "index_accessor" and len(expr.operands) == 2:
                return self._resolve_index(*expr.operands)
            return Opaque(_OPERATOR_KINDS.get(expr.kind))
        if isinstance(expr, Access):
            base = self._resolve(expr.base) if expr.rest is None else None
            if isinstance(base, Obj):
                value: Expr | Opaque = base
                for key in expr.path:
                    found = value.get(key) if isinstance(value, Obj) else None
                    if found is None:
                        return Opaque(None)  # reported by _check_json_references
                    value = self._resolve(found)
                return value
            return Opaque(self._access_kind(expr))
        return expr

    def _resolve_call(self, expr: Call) -> Expr | Opaque:
        if expr.name == "loadJsonContent" and len(expr.args) == 1:
            content = self._json_content(expr)
            return self._resolve(content) if not isinstance(content, str) else Opaque(None)
        if expr.name == "union" and expr.args:
            parts = [self._resolve(arg) for arg in expr.args]
            if all(isinstance(part, Obj) for part in parts):
                merged: dict[str, Pair] = {}
                for part in parts:
                    assert isinstance(part, Obj)
                    merged.update((pair.key, pair) for pair in part.pairs)
                return Obj(tuple(merged.values()), expr.line)
            if any(isinstance(part, Obj) for part in parts):
                return expr  # _check checks each part
            return Opaque(None)
        return Opaque(_FUNCTION_KINDS.get(expr.name))

    def _resolve_index(self, base: Expr, index: Expr) -> Expr | Opaque:
        key = self._resolve(index)
        if not isinstance(key, Lit):
            return Opaque(None)
        if isinstance(key.value, str):
            container = self._resolve(base)
            found = container.get(key.value) if isinstance(container, Obj) else None
            return self._resolve(found) if found is not None else Opaque(None)
        items = self._items(base)
        if isinstance(key.value, int) and items is not None and 0 <= key.value < len(items):
            return self._resolve(items[key.value])
        return Opaque(None)

    def _items(self, expr: Expr) -> tuple[Expr, ...] | None:
        """The items of an array known before deployment: a literal, JSON content, ``items()`` of a known
        object, or a ``[for ...]`` over one of these (each item the loop's body with its variables set)."""
        if isinstance(expr, Call) and expr.name == "items" and len(expr.args) == 1:
            obj = self._resolve(expr.args[0])
            if not isinstance(obj, Obj):
                return None
            return tuple(
                Obj((Pair("key", Lit(p.key, p.line), p.line), Pair("value", p.value, p.line)), p.line)
                for p in sorted(obj.pairs, key=lambda p: p.key.lower())
            )
        value = expr if isinstance(expr, Loop) else self._resolve(expr)
        if isinstance(value, Arr):
            return value.items
        if isinstance(value, Loop):
            source = self._items(value.source)
            if source is None:
                return None
            name, *index = value.names
            return tuple(
                _substitute(value.body, {name: item, **{i: Lit(n, value.line) for i in index}})
                for n, item in enumerate(source)
            )
        return None

    def _json_content(self, call: Call) -> Expr | str:
        """The content of ``loadJsonContent('<file>')`` as expressions, or why it cannot be read."""
        arg = call.args[0] if call.args else None
        if not (isinstance(arg, Lit) and isinstance(arg.value, str)):
            return "its file is not a string literal"
        path = (self.parsed.path.parent / arg.value).resolve()
        if path not in self._json:
            try:
                self._json[path] = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                self._json[path] = _Unreadable(f"{arg.value} not found (next to {self.parsed.path.name})")
            except (OSError, ValueError) as error:
                self._json[path] = _Unreadable(f"{arg.value} cannot be read as JSON: {error}")
        content = self._json[path]
        # Each mistake in the content is reported on the line of the call that reads it.
        return content.reason if isinstance(content, _Unreadable) else _from_json(content, call.line)

    def _access_kind(self, expr: Access) -> str | None:
        if expr.rest is not None or not isinstance(expr.base, Ref):
            return None
        symbol = expr.base.name
        if symbol in self.parsed.modules and len(expr.path) == 2 and expr.path[0] == "outputs":
            contract = self.module_contracts.get(symbol)
            output = contract.outputs.get(expr.path[1]) if contract else None
            if output is not None:
                saved = self._types
                self._types = contract.types if contract else {}
                kind = _kind(self._deref(output))
                self._types = saved
                return None if kind == "any" else kind
        if symbol in self.parsed.resources and expr.path in (("id",), ("name",), ("location",)):
            return "string"
        return None

    def _check(
        self,
        expr: Expr,
        node: TypeNode,
        where: str,
        *,
        noun: str = "property",
        keywords: set[str] | None = None,
        partial: bool = False,
    ) -> None:
        """Check ``expr`` against ``node``; ``partial``: it is one part of a ``union(...)``, so a required
        property may come from another part."""
        node = self._deref(node)
        if isinstance(node, AnyType):
            return
        if isinstance(node, UnionType):
            self._check_union(expr, node, where)
            return
        value = self._resolve(expr)
        line = getattr(expr, "line", 0)
        if isinstance(value, Cond):
            self._check(value.if_true, node, where, noun=noun, keywords=keywords, partial=partial)
            self._check(value.if_false, node, where, noun=noun, keywords=keywords, partial=partial)
            return
        expected = _kind(node)
        if isinstance(value, Call):  # union(...) with some parts known: check those
            if expected == "object":
                for part in value.args:
                    self._check(part, node, where, noun=noun, keywords=keywords, partial=True)
            return
        if isinstance(value, Opaque):
            self._check_opaque(value, node, expected, where, line)
        elif isinstance(value, Lit):
            self._check_literal(value, node, expected, where)
        elif isinstance(value, Arr | Loop):
            self._check_array(value, node, expected, where)
        elif isinstance(value, Obj):
            if expected != "object":
                self._report(value.line, where, f"an object where {_a(expected)} is expected")
            else:
                assert isinstance(node, ObjectType | DiscriminatedType)
                self._check_object(value, node, where, noun, keywords or set(), partial)

    def _check_union(self, expr: Expr, node: UnionType, where: str) -> None:
        best: list[Finding] | None = None
        saved = self.findings
        for option in node.options:
            self.findings = []
            self._check(expr, option, where)
            if not self.findings:
                self.findings = saved
                return
            if best is None or len(self.findings) < len(best):
                best = self.findings
        self.findings = saved + (best or [])

    def _check_opaque(self, value: Opaque, node: TypeNode, expected: str, where: str, line: int) -> None:
        if value.kind is None:
            return
        if value.kind != expected:
            self._report(line, where, f"{_a(value.kind)} value where {_a(expected)} is expected")
            return
        allowed = getattr(node, "allowed", None)
        if allowed and value.allowed:
            outside = [v for v in value.allowed if v not in allowed]
            if outside:
                self._report(
                    line,
                    where,
                    f"the parameter allows {', '.join(map(_describe, outside))}, which is not among "
                    f"the allowed values {', '.join(map(_describe, allowed))}",
                )

    def _check_literal(self, value: Lit, node: TypeNode, expected: str, where: str) -> None:
        v = value.value
        if v is None:
            return  # null: the property check decides whether null is acceptable
        actual = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        if actual != expected:
            self._report(value.line, where, f"{_describe(v)} is {_a(actual)}, {_a(expected)} is expected")
            return
        allowed = getattr(node, "allowed", None)
        if allowed is not None and v not in allowed:
            hint = [
                a for a in allowed if isinstance(a, str) and isinstance(v, str) and a.lower() == v.lower()
            ]
            more = f" (did you mean {hint[0]!r}?)" if hint else ""
            self._report(
                value.line,
                where,
                f"{_describe(v)} is not one of the allowed values {', '.join(map(_describe, allowed))}{more}",
            )
        if isinstance(node, IntType) and isinstance(v, int):
            if node.min_value is not None and v < node.min_value:
                self._report(value.line, where, f"{v} is below the minimum {node.min_value}")
            if node.max_value is not None and v > node.max_value:
                self._report(value.line, where, f"{v} is above the maximum {node.max_value}")
        if isinstance(node, StringType) and isinstance(v, str):
            if node.min_length is not None and len(v) < node.min_length:
                self._report(
                    value.line, where, f"{_describe(v)} is shorter than {node.min_length} characters"
                )
            if node.max_length is not None and len(v) > node.max_length:
                self._report(value.line, where, f"{_describe(v)} is longer than {node.max_length} characters")

    def _check_array(self, value: Arr | Loop, node: TypeNode, expected: str, where: str) -> None:
        if expected != "array":
            self._report(value.line, where, f"an array where {_a(expected)} is expected")
            return
        assert isinstance(node, ArrayType)
        items = self._items(value)
        if items is None:  # a loop over a value known only at deployment: its body, once
            if isinstance(value, Loop) and node.items is not None:
                self._check(value.body, node.items, f"{where}[*]")
            return
        count = len(items)
        if node.min_length is not None and count < node.min_length:
            self._report(value.line, where, f"{count} item(s), at least {node.min_length} required")
        if node.max_length is not None and count > node.max_length:
            self._report(value.line, where, f"{count} item(s), at most {node.max_length} allowed")
        if node.items is not None:
            for index, item in enumerate(items):
                self._check(item, node.items, f"{where}[{index}]")

    def _check_object(
        self,
        value: Obj,
        node: ObjectType | DiscriminatedType,
        where: str,
        noun: str,
        keywords: set[str],
        partial: bool = False,
    ) -> None:
        if isinstance(node, DiscriminatedType):
            props = self._variant_properties(value, node, where)
            if props is None:
                return
            additional: TypeNode | None = None
        else:
            if node.properties is None:
                return  # free-form object
            props = node.properties
            additional = node.additional
        present = {pair.key for pair in value.pairs}
        for pair in value.pairs:
            prop = props.get(pair.key)
            path = f"{where}.{pair.key}"
            if prop is not None:
                if prop.read_only:
                    self._report(pair.line, path, f"read-only {noun} {pair.key!r} cannot be set")
                elif isinstance(pair.value, Lit) and pair.value.value is None:
                    if not prop.nullable and prop.required:
                        self._report(pair.line, path, f"null for required {noun} {pair.key!r}")
                else:
                    self._check(pair.value, prop.type, path)
            elif additional is not None:
                self._check(pair.value, additional, path)
            elif pair.key not in keywords:
                self._report(pair.line, path, self._unknown(pair.key, props, noun))
        for name, prop in props.items():
            if prop.required and name not in present and name not in keywords and not partial:
                near = [key for key in present if key.lower() == name.lower()]
                more = f" ({near[0]!r} is spelled differently)" if near else ""
                self._report(value.line, where, f"missing required {noun} {name!r}{more}")

    def _variant_properties(
        self, value: Obj, node: DiscriminatedType, where: str
    ) -> dict[str, Property] | None:
        tag_expr = value.get(node.discriminator)
        if tag_expr is None:
            self._report(value.line, where, f"missing required property {node.discriminator!r}")
            return None
        tag = self._resolve(tag_expr)
        if not isinstance(tag, Lit):
            return None
        variant = node.variants.get(str(tag.value))
        if variant is None:
            self._report(
                tag.line,
                f"{where}.{node.discriminator}",
                f"{_describe(tag.value)} is not one of {', '.join(map(_describe, node.variants))}",
            )
            return None
        resolved = self._deref(variant)
        props = dict(node.base)
        if isinstance(resolved, ObjectType) and resolved.properties is not None:
            props.update(resolved.properties)
        return props

    @staticmethod
    def _unknown(key: str, props: dict[str, Property], noun: str) -> str:
        same = [name for name in props if name.lower() == key.lower()]
        if same:
            return f"unknown {noun} {key!r}: the contract spells it {same[0]!r} (names are case-sensitive)"
        close = difflib.get_close_matches(key, list(props), n=1)
        return f"unknown {noun} {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")

    # ---- module output references -----------------------------------------------------------------
    def _all_expressions(self) -> Iterator[Expr]:
        parsed = self.parsed
        yield from parsed.variables.values()
        yield from (param.default for param in parsed.params.values() if param.default is not None)
        yield from (module.body for module in parsed.modules.values())
        yield from (resource.body for resource in parsed.resources.values())
        yield from (output.value for output in parsed.outputs.values())

    def _check_output_references(self, expr: Expr) -> None:
        for node in _walk(expr):
            if not (isinstance(node, Access) and isinstance(node.base, Ref)):
                continue
            symbol = node.base.name
            if symbol not in self.parsed.modules or not node.path or node.path[0] != "outputs":
                continue
            contract = self.module_contracts.get(symbol)
            if contract is None or len(node.path) < 2:
                continue
            name = node.path[1]
            if name not in contract.outputs:
                same = [o for o in contract.outputs if o.lower() == name.lower()]
                hint = (
                    f"; it declares {same[0]!r}"
                    if same
                    else f"; it declares {', '.join(sorted(contract.outputs))}"
                )
                self._report(
                    node.line, f"{symbol}.outputs.{name}", f"module {symbol} has no output {name!r}{hint}"
                )

    # ---- JSON content ---------------------------------------------------------------------------------
    def _check_json_references(self, expr: Expr) -> None:
        """Report a loadJsonContent file that cannot be read, and a property access into known content
        (JSON, or a literal object) that names a property it does not have. A loop over a known array is
        walked once per item, so an access through its variable is checked too."""
        for node in self._walk_expanded(expr):
            if isinstance(node, Call) and node.name == "loadJsonContent":
                content = self._json_content(node)
                if isinstance(content, str):
                    self._report_once(node.line, "loadJsonContent", content)
            elif isinstance(node, Access) and node.rest is None:
                message = self._missing_property(node)
                if message:
                    self._report_once(node.line, ".".join(node.path), message)

    def _report_once(self, line: int, where: str, message: str) -> None:
        if not any(f.line == line and f.where == where for f in self.findings):
            self._report(line, where, message)

    def _missing_property(self, node: Access) -> str | None:
        value = self._resolve(node.base)
        for key in node.path:
            if not isinstance(value, Obj):
                return None
            found = value.get(key)
            if found is None:
                names = ", ".join(sorted(p.key for p in value.pairs))
                return f"no property {key!r} in this object (it has {names})"
            value = self._resolve(found)
        return None

    def _walk_expanded(self, expr: Expr) -> Iterator[Expr]:
        """``expr`` and everything in it; a loop over a known array gives its items, not its body."""
        yield expr
        if isinstance(expr, Loop) and (items := self._items(expr)) is not None:
            children: tuple[Expr, ...] = (expr.source, *items)
        else:
            children = _children(expr)
        for child in children:
            yield from self._walk_expanded(child)


@dataclass(frozen=True)
class _Unreadable:
    reason: str


def _children(expr: Expr) -> tuple[Expr, ...]:
    children: tuple[Expr | None, ...] = ()
    if isinstance(expr, Arr):
        children = expr.items
    elif isinstance(expr, Obj):
        children = tuple(pair.value for pair in expr.pairs)
    elif isinstance(expr, Call | Op):
        children = expr.args if isinstance(expr, Call) else expr.operands
    elif isinstance(expr, Access):
        children = (expr.base, expr.rest)
    elif isinstance(expr, Cond):
        children = (expr.condition, expr.if_true, expr.if_false)
    elif isinstance(expr, Loop):
        children = (expr.source, expr.body)
    return tuple(child for child in children if child is not None)


def _from_json(value: Any, line: int) -> Expr:
    """JSON content as Bicep expressions on the line of the loadJsonContent call."""
    if isinstance(value, dict):
        return Obj(tuple(Pair(str(k), _from_json(v, line), line) for k, v in value.items()), line)
    if isinstance(value, list):
        return Arr(tuple(_from_json(v, line) for v in value), line)
    if isinstance(value, float):
        return Call("json", (Lit(json.dumps(value), line),), line)  # a number Bicep reads as is: unchecked
    return Lit(value, line)


def _bound(expr: Expr) -> set[str]:
    """The names a loop or lambda binds for its body."""
    if isinstance(expr, Loop):
        return set(expr.names)
    if isinstance(expr, Op) and expr.kind == "lambda_expression":
        return {o.name for o in expr.operands[:-1] if isinstance(o, Ref)}
    return set()


def _substitute(expr: Expr, values: Mapping[str, Expr]) -> Expr:
    """``expr`` with the references to ``values``' names replaced (names a loop or lambda inside rebinds
    are left alone there)."""
    if not values:
        return expr
    if isinstance(expr, Ref):
        return values.get(expr.name, expr)
    if isinstance(expr, Arr):
        return dataclasses.replace(expr, items=tuple(_substitute(i, values) for i in expr.items))
    if isinstance(expr, Obj):
        pairs = tuple(dataclasses.replace(p, value=_substitute(p.value, values)) for p in expr.pairs)
        return dataclasses.replace(expr, pairs=pairs)
    if isinstance(expr, Call):
        return dataclasses.replace(expr, args=tuple(_substitute(a, values) for a in expr.args))
    if isinstance(expr, Access):
        rest = _substitute(expr.rest, values) if expr.rest is not None else None
        return dataclasses.replace(expr, base=_substitute(expr.base, values), rest=rest)
    if isinstance(expr, Cond):
        return Cond(
            _substitute(expr.condition, values),
            _substitute(expr.if_true, values),
            _substitute(expr.if_false, values),
            expr.line,
        )
    inner = {k: v for k, v in values.items() if k not in _bound(expr)}
    if isinstance(expr, Loop):
        return dataclasses.replace(
            expr, source=_substitute(expr.source, values), body=_substitute(expr.body, inner)
        )
    if isinstance(expr, Op):
        if expr.kind == "lambda_expression":
            *params, body = expr.operands
            return dataclasses.replace(expr, operands=(*params, _substitute(body, inner)))
        return dataclasses.replace(expr, operands=tuple(_substitute(o, values) for o in expr.operands))
    return expr


def _walk(expr: Expr) -> Iterator[Expr]:
    yield expr
    for child in _children(expr):
        yield from _walk(child)


def check_tree(infra: Path, contracts_dir: Path) -> list[Finding]:
    """Every finding in every Bicep file under ``infra``."""
    files = {path.resolve(): parse_file(path) for path in sorted(infra.rglob("*.bicep"))}
    contracts = Contracts(contracts_dir)
    findings: list[Finding] = []
    for parsed in files.values():
        findings.extend(FileChecker(parsed, contracts, files).run())
    return findings
