"""Contracts from the published sources: an AVM release's compiled ``main.json`` (ARM template language
2.0, with its user-defined types) and Azure's resource type definitions (bicep-types-az ``types.json``).

Only what the check reads is kept; descriptions and everything else are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .contracts import (
    AnyType,
    ArrayType,
    BoolType,
    DiscriminatedType,
    IntType,
    ObjectType,
    Property,
    RefType,
    StringType,
    TypeNode,
    UnionType,
)

DERIVED = "__bicep_resource_derived_type!"

# bicep-types property flags
REQUIRED = 1
READ_ONLY = 2


class ResourceTypes:
    """One bicep-types ``types.json``: converts the types reachable from a resource into contract types."""

    def __init__(self, types: list[dict[str, Any]], prefix: str) -> None:
        self._types = types
        self._prefix = prefix
        self.table: dict[str, TypeNode] = {}

    def resource_body(self, full_name: str) -> int:
        """Index of the body type of the resource ``Type@apiVersion`` (compared case-insensitively)."""
        for entry in self._types:
            if entry.get("$type") == "ResourceType" and entry["name"].lower() == full_name.lower():
                return _index(entry["body"])
        raise KeyError(full_name)

    def resource_name(self, full_name: str) -> str:
        """The resource's ``Type@apiVersion`` as the definition spells it."""
        for entry in self._types:
            if entry.get("$type") == "ResourceType" and entry["name"].lower() == full_name.lower():
                return str(entry["name"])
        raise KeyError(full_name)

    def derived(self, start: int, path: str) -> TypeNode:
        """The type at a resource-derived type path such as ``properties/properties/properties/siteConfig``.

        Through a discriminated object the path is followed into every variant that has the property,
        and the result is the union of what it finds there.
        """
        indexes = self._walk(start, [p for p in path.split("/") if p])
        if not indexes:
            raise KeyError(f"{path}: not found")
        return _union([self.node(i) for i in indexes]) if len(indexes) > 1 else self.node(indexes[0])

    def _walk(self, index: int, parts: list[str]) -> list[int]:
        if not parts:
            return [index]
        entry = self._types[index]
        if entry["$type"] == "DiscriminatedObjectType" and parts[0] == "properties":
            base = entry.get("baseProperties", {})
            if parts[1] in base:
                return self._walk(_index(base[parts[1]]["type"]), parts[2:])
            return [i for ref in entry["elements"].values() for i in self._walk(_index(ref), parts)]
        if parts[0] == "properties":
            props = entry.get("properties", {})
            return self._walk(_index(props[parts[1]]["type"]), parts[2:]) if parts[1] in props else []
        if parts[0] == "items":
            return self._walk(_index(entry["itemType"]), parts[1:])
        if parts[0] == "additionalProperties":
            return self._walk(_index(entry["additionalProperties"]), parts[1:])
        raise KeyError(f"cannot follow {parts[0]!r}")

    def node(self, index: int) -> TypeNode:
        """The contract type of entry ``index``; objects go into ``table`` (types can recurse)."""
        entry = self._types[index]
        kind = entry["$type"]
        if kind == "StringType":
            return StringType(
                kind="string", min_length=entry.get("minLength"), max_length=entry.get("maxLength")
            )
        if kind == "StringLiteralType":
            return StringType(kind="string", allowed=[entry["value"]])
        if kind == "IntegerType":
            return IntType(kind="int", min_value=entry.get("minValue"), max_value=entry.get("maxValue"))
        if kind == "IntegerLiteralType":
            return IntType(kind="int", allowed=[entry["value"]])
        if kind == "BooleanType" or kind == "BooleanLiteralType":
            return BoolType(kind="bool")
        if kind == "ArrayType":
            return ArrayType(
                kind="array",
                items=self.node(_index(entry["itemType"])),
                min_length=entry.get("minLength"),
                max_length=entry.get("maxLength"),
            )
        if kind == "UnionType":
            return _union([self.node(_index(e)) for e in entry["elements"]])
        if kind in ("ObjectType", "DiscriminatedObjectType"):
            key = f"{self._prefix}#{index}"
            if key not in self.table:
                self.table[key] = AnyType(kind="any")  # placeholder while a recursive type refers to itself
                self.table[key] = self._object(entry)
            return RefType(kind="ref", ref=key)
        return AnyType(kind="any")

    def _object(self, entry: dict[str, Any]) -> TypeNode:
        if entry["$type"] == "DiscriminatedObjectType":
            return DiscriminatedType(
                kind="discriminated",
                discriminator=entry["discriminator"],
                base=self._properties(entry.get("baseProperties", {})),
                variants={value: self.node(_index(ref)) for value, ref in entry["elements"].items()},
            )
        additional = entry.get("additionalProperties")
        return ObjectType(
            kind="object",
            properties=self._properties(entry.get("properties", {})),
            additional=self.node(_index(additional)) if additional else None,
        )

    def _properties(self, props: dict[str, Any]) -> dict[str, Property]:
        out: dict[str, Property] = {}
        for name, prop in props.items():
            flags = int(prop.get("flags", 0))
            out[name] = Property(
                type=self.node(_index(prop["type"])),
                required=bool(flags & REQUIRED),
                read_only=bool(flags & READ_ONLY) and not flags & REQUIRED,
            )
        return out


def _index(ref: dict[str, str]) -> int:
    text = ref["$ref"]
    if not text.startswith("#/"):
        raise ValueError(f"only local type references are supported, got {text!r}")
    return int(text[2:])


def _union(options: list[TypeNode]) -> TypeNode:
    """Literal strings become one string type with allowed values; a plain string among them opens it."""
    if options and all(isinstance(o, StringType) for o in options):
        strings = [o for o in options if isinstance(o, StringType)]
        if any(o.allowed is None for o in strings):
            return StringType(kind="string")
        return StringType(kind="string", allowed=[v for o in strings for v in (o.allowed or [])])
    if options and all(isinstance(o, IntType) and o.allowed for o in options):
        return IntType(
            kind="int", allowed=[v for o in options if isinstance(o, IntType) for v in o.allowed or []]
        )
    return UnionType(kind="union", options=options)


DerivedResolver = Callable[[str], TypeNode]


class ArmTemplate:
    """A compiled template (languageVersion 2.0): its parameters, user-defined types and outputs."""

    def __init__(self, template: dict[str, Any], derived: DerivedResolver) -> None:
        self._definitions: dict[str, Any] = template.get("definitions", {})
        self._template = template
        self._derived = derived
        self.table: dict[str, TypeNode] = {}

    def parameters(self) -> dict[str, Property]:
        """Every parameter; required when it has no default and is not nullable."""
        out: dict[str, Property] = {}
        for name, schema in self._template.get("parameters", {}).items():
            nullable = bool(schema.get("nullable"))
            out[name] = Property(
                type=self.node(schema),
                required=not nullable and "defaultValue" not in schema,
                nullable=nullable,
            )
        return out

    def outputs(self) -> dict[str, TypeNode]:
        """Every output's type."""
        return {name: self.node(schema) for name, schema in self._template.get("outputs", {}).items()}

    def node(self, schema: dict[str, Any]) -> TypeNode:
        """The contract type of one ARM type schema."""
        derived = schema.get("metadata", {}).get(DERIVED)
        if derived:
            return self._derived(derived["source"])
        if "$ref" in schema:
            name = schema["$ref"].removeprefix("#/definitions/")
            if name not in self.table:
                self.table[name] = AnyType(kind="any")
                self.table[name] = self.node(self._definitions[name])
            return RefType(kind="ref", ref=name)
        if "discriminator" in schema:
            disc = schema["discriminator"]
            return DiscriminatedType(
                kind="discriminated",
                discriminator=disc["propertyName"],
                base=self._properties(schema.get("properties", {})),
                variants={value: self.node(variant) for value, variant in disc["mapping"].items()},
            )
        kind = str(schema.get("type", "")).lower()
        allowed = schema.get("allowedValues")
        if kind in ("string", "securestring"):
            return StringType(
                kind="string",
                allowed=allowed,
                min_length=schema.get("minLength"),
                max_length=schema.get("maxLength"),
            )
        if kind == "int":
            return IntType(
                kind="int",
                allowed=allowed,
                min_value=schema.get("minValue"),
                max_value=schema.get("maxValue"),
            )
        if kind == "bool":
            return BoolType(kind="bool")
        if kind == "array":
            items_schema = schema.get("items")
            if isinstance(items_schema, dict):
                items: TypeNode | None = self.node(items_schema)
            elif allowed:
                # An array parameter with allowed values: each item must be one of them.
                items = _union([self._literal(v) for v in allowed])
            else:
                items = None
            return ArrayType(
                kind="array",
                items=items,
                min_length=schema.get("minLength"),
                max_length=schema.get("maxLength"),
            )
        if kind in ("object", "secureobject"):
            props = schema.get("properties")
            additional = schema.get("additionalProperties")
            if props is None and additional is None:
                return ObjectType(kind="object")  # free-form
            return ObjectType(
                kind="object",
                properties=self._properties(props or {}),
                additional=(
                    self.node(additional)
                    if isinstance(additional, dict)
                    else AnyType(kind="any")
                    if additional is True
                    else None
                ),
            )
        return AnyType(kind="any")

    @staticmethod
    def _literal(value: Any) -> TypeNode:
        if isinstance(value, bool):
            return BoolType(kind="bool")
        if isinstance(value, int):
            return IntType(kind="int", allowed=[value])
        if isinstance(value, str):
            return StringType(kind="string", allowed=[value])
        return AnyType(kind="any")

    def _properties(self, props: dict[str, Any]) -> dict[str, Property]:
        # In a user-defined object type, a property is required unless it is nullable.
        return {
            name: Property(
                type=self.node(schema),
                required=not schema.get("nullable"),
                nullable=bool(schema.get("nullable")),
            )
            for name, schema in props.items()
        }
