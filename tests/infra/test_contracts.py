"""The contract check of infra/: the pinned data, the check on the real tree, its self-test fixtures, the
Bicep reading it relies on, the conversion of published sources into contracts, and the refresh script
run against small git repositories shaped like the published ones."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bicep_contracts import cli
from bicep_contracts.check import Contracts, check_tree
from bicep_contracts.contracts import (
    DiscriminatedType,
    IntType,
    ObjectType,
    RefType,
    StringType,
    UnionType,
    load_module,
    load_resource,
    module_file,
    resource_file,
)
from bicep_contracts.derive import ArmTemplate, ResourceTypes
from bicep_contracts.refresh import refresh
from bicep_contracts.selftest import run_fixture, self_test
from bicep_contracts.syntax import Access, Interp, Lit, Ref, parse_text
from bicep_contracts.usage import registry_modules, registry_reference, resources_used

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CONTRACTS = INFRA / "contracts"
FIXTURES = Path(__file__).parent / "contract_fixtures"
COMMIT = re.compile(r"^[0-9a-f]{40}$")


# ---- the real tree and the pinned data ----------------------------------------------------------------
def test_infra_has_no_finding() -> None:
    assert [str(f) for f in check_tree(INFRA, CONTRACTS)] == []


@pytest.mark.parametrize(("module", "version"), sorted(registry_modules(INFRA)))
def test_every_module_version_has_a_contract_with_its_source(module: str, version: str) -> None:
    contract = load_module(module_file(CONTRACTS, module, version))
    assert (contract.module, contract.version) == (module, version)
    release, *derived = contract.sources
    assert release.repository == "Azure/bicep-registry-modules"
    assert release.ref == f"{module}/{version}"
    assert release.file == f"{module}/main.json"
    assert COMMIT.match(release.commit)
    for source in derived:
        assert source.repository == "Azure/bicep-types-az" and COMMIT.match(source.commit)
        assert source.file.endswith("/types.json") and source.covers
    assert "name" in contract.parameters and contract.outputs


@pytest.mark.parametrize("full_name", sorted(resources_used(INFRA)))
def test_every_resource_api_version_has_a_contract_with_its_source(full_name: str) -> None:
    type_name, _, api = full_name.partition("@")
    contract = load_resource(resource_file(CONTRACTS, type_name, api))
    assert (contract.resource, contract.api_version) == (type_name, api)
    (source,) = contract.sources
    assert source.repository == "Azure/bicep-types-az" and source.covers == full_name
    assert source.file.lower().endswith(f"/{type_name.split('/')[0].lower()}/{api}/types.json")


def test_no_contract_is_kept_that_infra_does_not_use() -> None:
    used = {module_file(CONTRACTS, m, v) for m, v in registry_modules(INFRA)} | {
        resource_file(CONTRACTS, *name.split("@")) for name in resources_used(INFRA)
    }
    assert set(CONTRACTS.rglob("*.json")) == used


# ---- the check on copies of the real tree with one mistake each -----------------------------------------
@pytest.fixture
def infra_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "infra"
    # The Bicep files and the JSON they read with loadJsonContent (infra/app/catalog.json).
    shutil.copytree(INFRA, copy, ignore=shutil.ignore_patterns("contracts", "checks", "*.py"))
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1))


def test_the_metric_alert_criteria_spelled_allOf_is_caught(infra_copy: Path) -> None:
    _edit(infra_copy / "app" / "alerts.bicep", "allof:", "allOf:")
    messages = [f.message for f in check_tree(infra_copy, CONTRACTS)]
    assert any("unknown property 'allOf': the contract spells it 'allof'" in m for m in messages)
    assert any("missing required property 'allof'" in m for m in messages)


def test_a_module_version_bump_without_its_contract_fails(infra_copy: Path) -> None:
    _edit(infra_copy / "app" / "storage.bicep", "storage-account:0.32.1", "storage-account:0.99.0")
    (finding,) = check_tree(infra_copy, CONTRACTS)
    assert "no pinned contract for avm/res/storage/storage-account:0.99.0" in finding.message


def test_a_resource_api_version_bump_without_its_contract_fails(infra_copy: Path) -> None:
    _edit(
        infra_copy / "app" / "rbac.bicep",
        "roleAssignments@2022-04-01' = {",
        "roleAssignments@2099-01-01' = {",
    )
    (finding,) = check_tree(infra_copy, CONTRACTS)
    assert "no pinned definition" in finding.message


def test_a_local_module_call_missing_a_parameter_fails(infra_copy: Path) -> None:
    _edit(infra_copy / "main.bicep", "    stateShards: stateShards\n", "")
    (finding,) = check_tree(infra_copy, CONTRACTS)
    assert finding.message == "missing required parameter 'stateShards'"


def test_a_local_output_that_does_not_exist_fails(infra_copy: Path) -> None:
    _edit(infra_copy / "main.bicep", "api.outputs.url\n", "api.outputs.uri\n")
    (finding,) = check_tree(infra_copy, CONTRACTS)
    assert "module api has no output 'uri'" in finding.message


def test_a_wrong_queue_property_in_the_generated_catalog_is_caught(infra_copy: Path) -> None:
    catalog = infra_copy / "app" / "catalog.json"
    content = json.loads(catalog.read_text())
    content["queues"][0]["maxDeliveryCount"] = str(content["queues"][0]["maxDeliveryCount"])
    content["queues"][-1]["lockduration"] = "PT1M"
    catalog.write_text(json.dumps(content))
    messages = [f"{f.where}: {f.message}" for f in check_tree(infra_copy, CONTRACTS)]
    assert len(messages) == 2, messages
    assert "params.queues[0].maxDeliveryCount: '5' is a string, an int is expected" in messages[0]
    assert "the contract spells it 'lockDuration'" in messages[1]


def test_infra_without_the_generated_catalog_fails(infra_copy: Path) -> None:
    (infra_copy / "app" / "catalog.json").unlink()
    found = {(f.file.name, f.message) for f in check_tree(infra_copy, CONTRACTS)}
    assert found == {
        ("function-app.bicep", "catalog.json not found (next to function-app.bicep)"),
        ("servicebus.bicep", "catalog.json not found (next to servicebus.bicep)"),
    }


def test_a_property_the_catalog_does_not_have_is_caught_through_a_loop(infra_copy: Path) -> None:
    _edit(
        infra_copy / "app" / "function-app.bicep",
        "contains(entryServiceNames, service.name)",
        "contains(entryServiceNames, service.nme)",
    )
    (finding,) = check_tree(infra_copy, CONTRACTS)
    assert finding.message.startswith("no property 'nme' in this object (it has functionName, name, queue")


# ---- self-test fixtures -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.bicep")), ids=lambda p: p.name)
def test_every_mistake_in_a_fixture_is_reported_and_nothing_else(fixture: Path) -> None:
    missed, unexpected = run_fixture(fixture, Contracts(CONTRACTS))
    assert missed == []
    assert [str(f) for f in unexpected] == []


def test_the_self_test_fails_when_a_marked_mistake_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "ok.bicep").write_text(
        "module m 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {\n"
        "  name: 'm'\n"
        "  params: {\n"
        "    name: 'fine' // expect: something that is not wrong\n"
        "  }\n"
        "}\n"
    )
    assert self_test(tmp_path, CONTRACTS) == [
        f"{tmp_path / 'ok.bicep'}:4: not reported: something that is not wrong"
    ]


def test_the_self_test_fails_on_a_false_alarm(tmp_path: Path) -> None:
    (tmp_path / "alarm.bicep").write_text(
        "module m 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {\n"
        "  name: 'm'\n"
        "  params: {\n"
        "    name: 'x'\n"
        "    bogus: 1 // expect: unknown parameter 'bogus'\n"
        "    other: 2\n"
        "  }\n"
        "}\n"
    )
    (problem,) = self_test(tmp_path, CONTRACTS)
    assert ":6:" in problem and "(false alarm)" in problem


def test_the_command_line_exits_1_on_a_finding_and_0_on_the_real_tree(
    infra_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(
            ["check", "--infra", str(INFRA), "--contracts", str(CONTRACTS), "--self-test", str(FIXTURES)]
        )
        == 0
    )
    assert "0 finding(s)" in capsys.readouterr().out
    _edit(infra_copy / "app" / "identity.bicep", "    name: name\n", "    Name: name\n")
    assert cli.main(["check", "--infra", str(infra_copy), "--contracts", str(CONTRACTS)]) == 1
    out = capsys.readouterr().out
    assert "identity.bicep" in out and "the contract spells it 'name'" in out


# ---- reading Bicep ----------------------------------------------------------------------------------------
def test_a_quoted_string_is_a_literal_and_a_bare_name_a_reference() -> None:
    parsed = parse_text(
        "param location string\n"
        "var a = 'location'\n"
        "var b = location\n"
        "var c = 'it\\'s ${location}'\n"
        "var d = 'tab\\there \\${not a hole}'\n"
        "var e = rg.outputs.name\n",
        Path("x.bicep"),
    )
    v = parsed.variables
    assert isinstance(v["a"], Lit) and v["a"].value == "location"
    assert isinstance(v["b"], Ref) and v["b"].name == "location"
    assert isinstance(v["c"], Interp)
    assert isinstance(v["d"], Lit) and v["d"].value == "tab\there ${not a hole}"
    assert isinstance(v["e"], Access) and v["e"].path == ("outputs", "name")


def test_nullable_parameters_and_defaults_decide_what_is_required() -> None:
    parsed = parse_text("param a string\nparam b string?\nparam c int = 1\n", Path("x.bicep"))
    assert [p.required for p in parsed.params.values()] == [True, False, False]


def test_registry_references() -> None:
    assert registry_reference("br/public:avm/res/web/site:0.24.0") == ("avm/res/web/site", "0.24.0")
    assert registry_reference("br:mcr.microsoft.com/bicep/avm/res/web/site:0.24.0") == (
        "avm/res/web/site",
        "0.24.0",
    )
    assert registry_reference("app/site.bicep") is None


# ---- from published sources to contracts -------------------------------------------------------------------
ARM_TEMPLATE: dict[str, Any] = {
    "definitions": {
        "skuType": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "allowedValues": ["Basic", "Standard"]},
                "capacity": {"type": "int", "nullable": True, "minValue": 1},
            },
        },
        "criteria": {
            "type": "object",
            "discriminator": {
                "propertyName": "odata.type",
                "mapping": {"A": {"type": "object", "properties": {"allof": {"type": "array"}}}},
            },
        },
    },
    "parameters": {
        "name": {"type": "string"},
        "location": {"type": "string", "defaultValue": "[resourceGroup().location]"},
        "sku": {"$ref": "#/definitions/skuType", "nullable": True},
        "criteria": {"$ref": "#/definitions/criteria"},
        "tags": {
            "type": "object",
            "metadata": {"__bicep_resource_derived_type!": {"source": "X/y@1#properties/tags"}},
        },
        "zones": {"type": "array", "allowedValues": [1, 2, 3], "defaultValue": []},
    },
    "outputs": {"resourceId": {"type": "string", "value": "[x]"}},
}


def test_arm_parameters_are_required_unless_defaulted_or_nullable() -> None:
    asked: list[str] = []
    arm = ArmTemplate(ARM_TEMPLATE, lambda source: asked.append(source) or ObjectType(kind="object"))
    params = arm.parameters()
    assert {n: p.required for n, p in params.items()} == {
        "name": True,
        "location": False,
        "sku": False,
        "criteria": True,
        "tags": True,
        "zones": False,
    }
    assert asked == ["X/y@1#properties/tags"]
    sku = arm.table["skuType"]
    assert isinstance(sku, ObjectType) and sku.properties is not None
    assert sku.properties["name"].required and not sku.properties["capacity"].required
    assert sku.properties["name"].type == StringType(kind="string", allowed=["Basic", "Standard"])
    assert sku.properties["capacity"].type == IntType(kind="int", min_value=1)
    assert isinstance(arm.table["criteria"], DiscriminatedType)
    zones = params["zones"].type
    assert zones.kind == "array" and zones.items == IntType(kind="int", allowed=[1, 2, 3])  # type: ignore[union-attr]
    assert arm.outputs() == {"resourceId": StringType(kind="string")}


RESOURCE_TYPES: list[dict[str, Any]] = [
    {"$type": "StringType"},
    {"$type": "ResourceType", "name": "X.Y/things@2024-01-01", "body": {"$ref": "#/2"}},
    {
        "$type": "ObjectType",
        "name": "X.Y/things",
        "properties": {
            "name": {"type": {"$ref": "#/0"}, "flags": 9},
            "id": {"type": {"$ref": "#/0"}, "flags": 10},
            "properties": {"type": {"$ref": "#/3"}, "flags": 0},
        },
    },
    {
        "$type": "DiscriminatedObjectType",
        "discriminator": "kind",
        "baseProperties": {},
        "elements": {"a": {"$ref": "#/4"}},
    },
    {"$type": "ObjectType", "properties": {"tier": {"type": {"$ref": "#/7"}, "flags": 1}}},
    {"$type": "StringLiteralType", "value": "Hot"},
    {"$type": "StringLiteralType", "value": "Cool"},
    {"$type": "UnionType", "elements": [{"$ref": "#/5"}, {"$ref": "#/6"}]},
    {"$type": "UnionType", "elements": [{"$ref": "#/5"}, {"$ref": "#/0"}]},
]


def test_resource_types_keep_flags_literals_and_follow_derived_paths_through_variants() -> None:
    reader = ResourceTypes(RESOURCE_TYPES, "X.Y/things@2024-01-01")
    body = reader.node(reader.resource_body("x.y/THINGS@2024-01-01"))
    assert isinstance(body, RefType)
    entry = reader.table[body.ref]
    assert isinstance(entry, ObjectType) and entry.properties is not None
    assert entry.properties["name"].required and entry.properties["id"].read_only
    assert reader.node(7) == StringType(kind="string", allowed=["Hot", "Cool"])
    assert reader.node(8) == StringType(kind="string"), "a union with a plain string accepts any string"
    tier = reader.derived(2, "properties/properties/properties/tier")
    assert tier == StringType(kind="string", allowed=["Hot", "Cool"])
    assert not isinstance(tier, UnionType)


# ---- the refresh script, on git repositories shaped like the published ones -----------------------
def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
    )


def _repo(path: Path, files: dict[str, Any], tag: str | None = None) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(content))
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "c")
    if tag:
        _git(path, "tag", tag)
    return path


def test_refresh_writes_the_contracts_infra_uses_with_their_sources_and_drops_the_rest(
    tmp_path: Path,
) -> None:
    template = {**ARM_TEMPLATE}
    template["parameters"] = {
        **ARM_TEMPLATE["parameters"],
        "tags": {
            "type": "object",
            "metadata": {
                "__bicep_resource_derived_type!": {"source": "X.Y/things@2024-01-01#properties/properties"}
            },
        },
    }
    avm = _repo(tmp_path / "avm", {"avm/res/x/thing/main.json": template}, tag="avm/res/x/thing/1.0.0")
    types = _repo(tmp_path / "types", {"generated/x/x.y/2024-01-01/types.json": RESOURCE_TYPES})
    infra = tmp_path / "infra"
    infra.mkdir()
    (infra / "main.bicep").write_text(
        "module t 'br/public:avm/res/x/thing:1.0.0' = {\n  name: 't'\n  params: {\n    name: 'a'\n  }\n}\n"
        "resource r 'X.Y/things@2024-01-01' existing = {\n  name: 'r'\n}\n"
    )
    contracts = tmp_path / "contracts"
    stale = contracts / "modules" / "avm.res.x.old@0.1.0.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    written = refresh(infra, contracts, avm, types)
    assert sorted(p.name for p in written) == ["avm.res.x.thing@1.0.0.json", "x.y.things@2024-01-01.json"]
    assert not stale.exists()
    module = load_module(contracts / "modules" / "avm.res.x.thing@1.0.0.json")
    assert module.sources[0].ref == "avm/res/x/thing/1.0.0"
    assert module.sources[1].covers == "X.Y/things@2024-01-01"
    assert module.sources[1].file == "generated/x/x.y/2024-01-01/types.json"
    findings = check_tree(infra, contracts)
    assert sorted(f.message for f in findings) == [
        "missing required parameter 'criteria'",
        "missing required parameter 'tags'",
    ]


def test_refresh_names_a_module_version_that_was_never_released(tmp_path: Path) -> None:
    avm = _repo(tmp_path / "avm", {"README.md": "x"})
    types = _repo(tmp_path / "types", {"generated/x/x.y/2024-01-01/types.json": RESOURCE_TYPES})
    infra = tmp_path / "infra"
    infra.mkdir()
    (infra / "main.bicep").write_text("module t 'br/public:avm/res/x/thing:9.9.9' = {\n  name: 't'\n}\n")
    with pytest.raises(LookupError, match=r"no release tag avm/res/x/thing/9\.9\.9"):
        refresh(infra, tmp_path / "contracts", avm, types)


def test_concat_skip_and_take_have_their_arguments_type(tmp_path: Path) -> None:
    # Their type is their arguments' (a string of strings, an array of arrays): neither is a false alarm.
    (tmp_path / "kinds.bicep").write_text(
        "param extra array = []\n"
        "module m 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {\n"
        "  name: 'm'\n"
        "  params: {\n"
        "    name: concat('id-', take('abcdef', 3))\n"
        "    roleAssignments: concat(skip(extra, 1), take(extra, 1))\n"
        "    federatedIdentityCredentials: concat([], extra)\n"
        "    bogus: 1 // expect: unknown parameter 'bogus'\n"
        "  }\n"
        "}\n"
    )
    assert self_test(tmp_path, CONTRACTS) == []
