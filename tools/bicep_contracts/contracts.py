"""The contract files: what a pinned module version or resource API version accepts, as data.

A contract keeps only what the check needs from the published source: parameter and property names,
whether each is required, nullable or read-only, types, allowed values, bounds, nested and discriminated
object types, array item types, and a module's outputs. Object types that can nest (or recurse, as some
resource types do) live in a ``types`` table and are referred to by id.

Files live in ``infra/contracts/``: ``modules/<module path with / as .>@<version>.json`` and
``resources/<type with / as .>@<api version>.json``. ``bicep-contracts refresh`` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StringType(_Node):
    kind: Literal["string"]
    allowed: list[str] | None = None
    min_length: int | None = None
    max_length: int | None = None


class IntType(_Node):
    kind: Literal["int"]
    allowed: list[int] | None = None
    min_value: int | None = None
    max_value: int | None = None


class BoolType(_Node):
    kind: Literal["bool"]


class AnyType(_Node):
    kind: Literal["any"]


class ArrayType(_Node):
    kind: Literal["array"]
    items: TypeNode | None = None  # None: items of any type
    min_length: int | None = None
    max_length: int | None = None


class Property(_Node):
    type: TypeNode
    required: bool = False
    nullable: bool = False
    read_only: bool = False


class ObjectType(_Node):
    """``properties`` None is a free-form object; otherwise only the named properties (plus, when
    ``additional`` is set, any other key whose value has that type)."""

    kind: Literal["object"]
    properties: dict[str, Property] | None = None
    additional: TypeNode | None = None


class DiscriminatedType(_Node):
    """An object whose ``discriminator`` property's value picks one of ``variants``."""

    kind: Literal["discriminated"]
    discriminator: str
    base: dict[str, Property] = Field(default_factory=dict)
    variants: dict[str, TypeNode]


class UnionType(_Node):
    kind: Literal["union"]
    options: list[TypeNode]


class RefType(_Node):
    """A type in the contract's ``types`` table."""

    kind: Literal["ref"]
    ref: str


TypeNode = Annotated[
    StringType
    | IntType
    | BoolType
    | AnyType
    | ArrayType
    | ObjectType
    | DiscriminatedType
    | UnionType
    | RefType,
    Field(discriminator="kind"),
]

for _model in (ArrayType, Property, ObjectType, DiscriminatedType, UnionType):
    _model.model_rebuild()


class Source(BaseModel):
    """Where a contract (or part of one) was read: a file at a tag or commit of a public repository."""

    model_config = ConfigDict(extra="forbid")

    repository: str
    ref: str  # the tag, or the commit when the repository tags nothing
    commit: str
    file: str
    covers: str | None = None  # for a resource-derived type: the resource type it was read for


class ModuleContract(BaseModel):
    """A module version's parameters (as properties: required, nullable, type) and outputs."""

    model_config = ConfigDict(extra="forbid")

    module: str  # e.g. avm/res/web/site
    version: str
    sources: list[Source]
    parameters: dict[str, Property]
    outputs: dict[str, TypeNode]
    types: dict[str, TypeNode] = Field(default_factory=dict)


class ResourceContract(BaseModel):
    """A resource type at one API version: the body a ``resource`` declaration may set."""

    model_config = ConfigDict(extra="forbid")

    resource: str  # e.g. Microsoft.Web/sites, as the published definition spells it
    api_version: str
    sources: list[Source]
    body: TypeNode
    types: dict[str, TypeNode] = Field(default_factory=dict)


def module_file(contracts_dir: Path, module: str, version: str) -> Path:
    """Where the contract of ``module`` at ``version`` is kept."""
    return contracts_dir / "modules" / f"{module.replace('/', '.')}@{version}.json"


def resource_file(contracts_dir: Path, resource: str, api_version: str) -> Path:
    """Where the contract of ``resource`` at ``api_version`` is kept (type names are case-insensitive)."""
    return contracts_dir / "resources" / f"{resource.replace('/', '.').lower()}@{api_version}.json"


def load_module(path: Path) -> ModuleContract:
    """Read a module contract."""
    return ModuleContract.model_validate_json(path.read_text(encoding="utf-8"))


def load_resource(path: Path) -> ResourceContract:
    """Read a resource contract."""
    return ResourceContract.model_validate_json(path.read_text(encoding="utf-8"))


def dump(contract: ModuleContract | ResourceContract, path: Path) -> None:
    """Write a contract, compact but stable (sorted keys) so a refresh shows as a readable diff."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = contract.model_dump_json(exclude_defaults=True, indent=1)
    path.write_text(text + "\n", encoding="utf-8")
