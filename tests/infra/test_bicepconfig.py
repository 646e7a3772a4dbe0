"""infra/bicepconfig.json: the Bicep linter's rules, and the ones that can be checked here without Bicep.

The pipeline (.github/workflows/azure-dev.yml) runs ``az bicep lint`` on infra/main.bicep, and a rule at
"error" fails it. These tests keep the config valid and check, offline, the rules that are cheap to
check, so the pipeline does not find them first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pycep import BicepParser

from tests.infra.bicep_refs import declarations, scan, unused

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CONFIG = INFRA / "bicepconfig.json"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))

# Rule names from the Bicep linter documentation (learn.microsoft.com/azure/azure-resource-manager/
# bicep/linter and bicep-config-linter).
KNOWN_RULES = {
    "adminusername-should-not-be-literal",
    "artifacts-parameters",
    "decompiler-cleanup",
    "explicit-values-for-loc-params",
    "max-asserts",
    "max-outputs",
    "max-params",
    "max-resources",
    "max-variables",
    "nested-deployment-template-scoping",
    "no-conflicting-metadata",
    "no-deployments-resources",
    "no-explicit-any",
    "no-hardcoded-env-urls",
    "no-hardcoded-location",
    "no-loc-expr-outside-params",
    "no-unnecessary-dependson",
    "no-unused-existing-resources",
    "no-unused-params",
    "no-unused-vars",
    "outputs-should-not-contain-secrets",
    "prefer-interpolation",
    "prefer-unquoted-property-names",
    "secure-parameter-default",
    "secure-params-in-nested-deploy",
    "secure-secrets-in-params",
    "simplify-interpolation",
    "simplify-json-null",
    "use-parent-property",
    "use-protectedsettings-for-commandtoexecute-secrets",
    "use-recent-api-versions",
    "use-resource-id-functions",
    "use-resource-symbol-reference",
    "use-stable-resource-identifiers",
    "use-stable-vm-image",
}
LEVELS = {"error", "warning", "info", "off"}
MUST_BE_ERRORS = {
    "no-unused-params",
    "no-unused-vars",
    "secure-secrets-in-params",
    "outputs-should-not-contain-secrets",
    "use-resource-id-functions",
    "no-hardcoded-env-urls",
    "prefer-interpolation",
    "use-stable-resource-identifiers",
    "no-unnecessary-dependson",
    "explicit-values-for-loc-params",
}
# The linter's default disallowed hosts for no-hardcoded-env-urls (from the same documentation).
ENVIRONMENT_HOSTS = (
    "management.core.windows.net",
    "gallery.azure.com",
    "management.azure.com",
    "database.windows.net",
    "core.windows.net",
    "login.microsoftonline.com",
    "graph.windows.net",
    "trafficmanager.net",
    "vault.azure.net",
    "datalake.azure.net",
    "azuredatalakestore.net",
    "azuredatalakeanalytics.net",
    "api.loganalytics.io",
    "asazure.windows.net",
    "batch.core.windows.net",
)


def rules() -> dict[str, Any]:
    return json.loads(CONFIG.read_text())["analyzers"]["core"]["rules"]


def ids(path: Path) -> str:
    return path.relative_to(INFRA).as_posix()


# ---- the config itself -----------------------------------------------------------------------------
def test_the_config_is_found_for_main_bicep_and_stays_out_of_the_package() -> None:
    # Bicep looks for bicepconfig.json in the file's directory, then its parents.
    found = [d / "bicepconfig.json" for d in (INFRA, *INFRA.parents) if (d / "bicepconfig.json").is_file()]
    assert found and found[0] == CONFIG
    assert "infra/" in (ROOT / ".funcignore").read_text().splitlines()


def test_the_linter_is_on_with_known_rules_and_valid_levels() -> None:
    core = json.loads(CONFIG.read_text())["analyzers"]["core"]
    assert core["enabled"] is True
    configured = core["rules"]
    assert set(configured) <= KNOWN_RULES, f"unknown rules: {sorted(set(configured) - KNOWN_RULES)}"
    bad = {name: rule.get("level") for name, rule in configured.items() if rule.get("level") not in LEVELS}
    assert not bad, bad


def test_the_rules_that_matter_are_errors() -> None:
    configured = rules()
    assert {name for name in MUST_BE_ERRORS if configured.get(name, {}).get("level") != "error"} == set()
    assert configured["use-recent-api-versions"]["level"] == "warning", "a new API version must not fail CI"


# ---- no-unused-params, no-unused-vars ----------------------------------------------------------------
@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_every_param_and_var_is_used_in_its_file(path: Path) -> None:
    assert unused(path.read_text()) == {"param": [], "var": []}


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_the_scanner_sees_the_declarations_pycep_sees(path: Path) -> None:
    parsed = BicepParser().parse(file_path=path)
    found = declarations(scan(path.read_text()).code)
    assert found.get("param", set()) == set(parsed.get("parameters", {}))
    assert found.get("var", set()) == set(parsed.get("variables", {}))


def test_an_unused_param_or_var_is_found() -> None:
    main = (INFRA / "main.bicep").read_text()
    assert unused(main + "\nparam spare string\nvar spareVar = location\n") == {
        "param": ["spare"],
        "var": ["spareVar"],
    }
    text = """
param inKey string
param inText string
param inMember string
param inInterpolation string
param inTernary bool
var obj = {
  inKey: 'inText and inMember'
  other: rg.inMember
  name: 'x-${inInterpolation}'
  flag: inTernary ? 'a' : 'b'
}
output o object = obj
"""
    assert unused(text) == {"param": ["inKey", "inMember", "inText"], "var": []}


# ---- the other rules at "error" that are cheap to check ---------------------------------------------
@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_no_concat_and_no_location_expression_outside_parameters(path: Path) -> None:
    code = scan(path.read_text()).code
    assert not re.search(r"\bconcat\s*\(", code), "prefer-interpolation: use '${a}${b}'"
    outside_params = [line for line in code.splitlines() if not line.startswith("param ")]
    found = [line for line in outside_params if re.search(r"(resourceGroup|deployment)\(\)\.location", line)]
    assert not found, f"no-loc-expr-outside-params: {found}"


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_no_hardcoded_environment_hosts(path: Path) -> None:
    literals = scan(path.read_text()).literals
    pattern = re.compile(r"(^|[^A-Za-z0-9-])(" + "|".join(re.escape(h) for h in ENVIRONMENT_HOSTS) + r")\b")
    found = [text for text in literals if pattern.search(text)]
    assert not found, f"no-hardcoded-env-urls: use environment() instead of {found}"


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_module_calls_pass_location_explicitly(path: Path) -> None:
    # explicit-values-for-loc-params: AVM modules default location to resourceGroup().location.
    parsed = BicepParser().parse(file_path=path)
    for name, mod in parsed.get("modules", {}).items():
        if mod["type"] == "local":
            continue
        params = mod["config"].get("params", {})
        assert "location" in params, f"{path.name}: module {name} relies on its default location"


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids)
def test_secret_looking_parameters_are_secure(path: Path) -> None:
    parsed = BicepParser().parse(file_path=path)
    for name, param in parsed.get("parameters", {}).items():
        if re.search(r"password|secret|token", name, re.IGNORECASE) and name != "resourceToken":
            assert any(d["type"] == "secure" for d in param["decorators"]), f"{path.name}: {name}"
