"""The GitHub workflows: CI runs the suite; the azd pipeline logs in with federated credentials, checks the
Bicep before it provisions, then deploys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    if True in workflow:
        workflow["on"] = workflow.pop(True)
    return workflow


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


def index_of(
    all_steps: list[dict[str, Any]], what: str, *, uses: str | None = None, run: str | None = None
) -> int:
    """The index of the one step that uses the action ``uses`` or whose script matches ``run``."""
    found = [
        i
        for i, step in enumerate(all_steps)
        if (uses and step.get("uses", "").lower().split("@")[0] == uses.lower())
        or (run and re.search(run, step.get("run", "")))
    ]
    assert len(found) == 1, f"expected one step that {what}, found {len(found)}"
    return found[0]


# ---- ci.yml --------------------------------------------------------------------------------------------
def test_ci_runs_make_test_on_push_and_pull_request_with_python_313_and_node_20() -> None:
    ci = load("ci.yml")
    assert {"push", "pull_request"} <= set(ci["on"])
    all_steps = steps(ci)
    checkout = index_of(all_steps, "checks out", uses="actions/checkout")
    python = all_steps[index_of(all_steps, "sets up Python", uses="actions/setup-python")]
    node = all_steps[index_of(all_steps, "sets up Node", uses="actions/setup-node")]
    assert str(python["with"]["python-version"]) == "3.13"
    assert str(node["with"]["node-version"]) == "20"
    test = index_of(all_steps, "runs make test", run=r"(^|\n)\s*make test\b")
    assert checkout < test
    assert all_steps.index(python) < test and all_steps.index(node) < test


# ---- azure-dev.yml -------------------------------------------------------------------------------------
def test_the_pipeline_runs_on_dispatch_and_pushes_to_main_with_an_oidc_token() -> None:
    pipeline = load("azure-dev.yml")
    assert "workflow_dispatch" in pipeline["on"]
    assert pipeline["on"]["push"]["branches"] == ["main"]
    assert pipeline["permissions"] == {"id-token": "write", "contents": "read"}
    (job,) = pipeline["jobs"].values()
    for name in (
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_SUBSCRIPTION_ID",
        "AZURE_ENV_NAME",
        "AZURE_LOCATION",
    ):
        assert job["env"][name] == f"${{{{ vars.{name} }}}}", name
    assert job["env"]["AZURE_PRINCIPAL_TYPE"] == "ServicePrincipal", "main.parameters.json reads it"


def test_the_pipeline_logs_in_with_federated_credentials() -> None:
    all_steps = steps(load("azure-dev.yml"))
    index_of(all_steps, "installs azd", uses="Azure/setup-azd")
    login = all_steps[index_of(all_steps, "logs azd in", run=r"azd auth login")]["run"]
    assert '--client-id "$AZURE_CLIENT_ID"' in login
    assert '--federated-credential-provider "github"' in login
    assert '--tenant-id "$AZURE_TENANT_ID"' in login
    assert "--client-secret" not in login
    az_login = all_steps[index_of(all_steps, "logs the Azure CLI in", uses="azure/login")]["with"]
    assert az_login == {
        "client-id": "${{ vars.AZURE_CLIENT_ID }}",
        "tenant-id": "${{ vars.AZURE_TENANT_ID }}",
        "subscription-id": "${{ vars.AZURE_SUBSCRIPTION_ID }}",
    }, "OIDC: no client secret or creds"


def test_the_bicep_is_built_and_linted_before_provisioning_then_deployed() -> None:
    all_steps = steps(load("azure-dev.yml"))
    checkout = index_of(all_steps, "checks out", uses="actions/checkout")
    azd_login = index_of(all_steps, "logs azd in", run=r"azd auth login")
    az_login = index_of(all_steps, "logs the Azure CLI in", uses="azure/login")
    build = index_of(all_steps, "builds the Bicep", run=r"az bicep build --file infra/main\.bicep\b")
    lint = index_of(all_steps, "lints the Bicep", run=r"az bicep lint --file infra/main\.bicep\b")
    provision = index_of(all_steps, "provisions", run=r"azd provision --no-prompt")
    deploy = index_of(all_steps, "deploys", run=r"azd deploy --no-prompt")
    assert checkout < az_login < build < lint < provision < deploy
    assert azd_login < provision
    for i in (build, lint, provision, deploy):
        assert not all_steps[i].get("continue-on-error"), all_steps[i]
        assert "if" not in all_steps[i], "the checks and the deployment always run"


@pytest.mark.parametrize("name", ["ci.yml", "azure-dev.yml"])
def test_every_action_is_pinned_to_a_version(name: str) -> None:
    used = [step["uses"] for step in steps(load(name)) if "uses" in step]
    assert used
    for action in used:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", action), action
