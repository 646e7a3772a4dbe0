"""What the Azure deployment must hold for the declared services, as one list, and the checks that compare
the Bicep (evaluated offline, ``bicep_eval``) and ``infra/main.parameters.json`` with it.

Each check returns the problems it finds (an empty list when all is well), so that a test can run it on a
deliberately broken copy of ``infra/`` and see it name what is missing.

- ``expected_services``: per declared service (``orders.catalog.SERVICES``), its entry in the generated
  ``infra/app/catalog.json``, its queue, its URL app setting; every queue of every declared workflow.
- ``service_problems``: the queues ``app/servicebus.bicep`` creates, the app settings
  ``app/function-app.bicep`` sets, and the dead-letter alert of ``app/alerts.bicep``, each evaluated from
  the Bicep's own expressions (``loadJsonContent('catalog.json')`` included), against that list.
- ``parameter_problems``: every parameter ``main.bicep`` takes is either fed by ``main.parameters.json``
  (with the azd variable of ``MAIN_PARAMETERS``) or deliberately left to its default, and the file feeds
  no parameter ``main.bicep`` does not take.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bicep_contracts.syntax import Obj, body_object, parse_file
from engine import queues
from engine.workflow import WorkflowCatalog
from orders.catalog import CATALOG, SERVICES
from orders.services.declaration import ServiceDefinition
from tests.infra.bicep_eval import Evaluator

SIMULATORS_URL = "https://func-x.azurewebsites.net/api/sim"


@dataclass(frozen=True)
class ExpectedService:
    """What the deployment holds for one declared service."""

    name: str
    queue: str
    url_setting: str
    function_name: str

    def catalog_entry(self) -> dict[str, str]:
        """Its entry under ``services`` in ``infra/app/catalog.json``."""
        return {
            "name": self.name,
            "queue": self.queue,
            "urlSetting": self.url_setting,
            "functionName": self.function_name,
        }


def expected_services(services: Iterable[ServiceDefinition] = SERVICES) -> list[ExpectedService]:
    """The one list: every declared service's queue, URL setting and agent function."""
    return [
        ExpectedService(s.name, queues.agent_queue(s.name), s.url_setting, s.function_name) for s in services
    ]


def expected_queues(catalog: WorkflowCatalog = CATALOG) -> list[str]:
    """Every queue of every declared workflow version, the engine's included."""
    return queues.all_queues(catalog.agents)


# Every parameter main.bicep takes: the azd variable main.parameters.json feeds it from, or None when the
# deployment leaves it to its default (set it in the parameters file to make it an azd variable).
MAIN_PARAMETERS: dict[str, str | None] = {
    "environmentName": "${AZURE_ENV_NAME}",
    "location": "${AZURE_LOCATION}",
    "principalId": "${AZURE_PRINCIPAL_ID}",
    "principalType": "${AZURE_PRINCIPAL_TYPE=User}",
    "alertEmail": "${ALERT_EMAIL=}",
    # One variable for every declared service's URL (catalog.json names the services).
    "serviceUrls": "${SERVICE_URLS=}",
    "simulatorsKey": None,
    "authClientId": "${AZURE_AUTH_CLIENT_ID=}",
    "stepCompleteBySeconds": None,
    "supervisorSchedule": "${SUPERVISOR_SCHEDULE=*/30 * * * * *}",
    "orderRetention": None,
    "waitSeconds": None,
    "publicBaseUrl": "${PUBLIC_BASE_URL=}",
    "supervisorMaxFailures": None,
    "supervisorBackoffSeconds": None,
    "supervisorMaxBackoffSeconds": None,
    "stateTableName": None,
    "stateShards": None,
    "instanceMemoryMB": None,
    "maximumInstanceCount": None,
    "serviceBusSku": "${SERVICE_BUS_SKU=Standard}",
    "serviceBusCapacity": "${SERVICE_BUS_CAPACITY=1}",
    # A JSON array (azd 1.23.4 and later parse a JSON value for an array parameter).
    "storefronts": "${STOREFRONTS_JSON=[]}",
    # true once a rotation has made the secret input-encryption-previous-keys (docs/deploying.md).
    "inputEncryptionPreviousKeys": "${INPUT_ENCRYPTION_PREVIOUS_KEYS_SECRET=false}",
}


def _module_params(evaluator: Evaluator, module: str) -> Obj:
    found = evaluator.file.modules.get(module)
    assert found is not None, f"{evaluator.file.path.name}: no module {module}"
    body = body_object(found.body)
    params = body.get("params") if body is not None else None
    assert isinstance(params, Obj), f"{evaluator.file.path.name}: module {module} has no params"
    return params


def created_queues(infra: Path) -> list[str]:
    """The names of the queues ``app/servicebus.bicep`` hands the namespace module."""
    evaluator = Evaluator(infra / "app" / "servicebus.bicep", {})
    queues_param = _module_params(evaluator, "namespace").get("queues")
    assert queues_param is not None, "servicebus.bicep: the namespace module gets no queues"
    return [queue["name"] for queue in evaluator.eval(queues_param)]


def app_settings(infra: Path, service_urls: str = "") -> dict[str, Any]:
    """The app settings ``app/function-app.bicep`` gives the Function App for this SERVICE_URLS."""
    params = {"name": "func-x", "serviceUrls": service_urls, "simulatorsKey": "k", "authClientId": ""}
    evaluator = Evaluator(infra / "app" / "function-app.bicep", params)
    configs = _module_params(evaluator, "site").get("configs")
    assert configs is not None, "function-app.bicep: the site module gets no configs"
    (config,) = [c for c in evaluator.eval(configs) if c["name"] == "appsettings"]
    return dict(config["properties"])


def dead_letter_alert_queues(infra: Path) -> list[str]:
    """The queues (EntityName values, ``*`` for all) the broker's dead-letter alert watches."""
    evaluator = Evaluator(infra / "app" / "alerts.bicep", {})
    criteria = _module_params(evaluator, "deadLetterAlert").get("criteria")
    assert criteria is not None, "alerts.bicep: the dead-letter alert has no criteria"
    watched: list[str] = []
    for criterion in evaluator.eval(criteria)["allof"]:
        if criterion["metricName"] != "DeadletteredMessages":
            continue
        for dimension in criterion.get("dimensions", []):
            if dimension["name"] == "EntityName" and dimension["operator"] == "Include":
                watched += dimension["values"]
    return watched


def service_problems(
    infra: Path,
    services: list[ExpectedService] | None = None,
    all_queues: list[str] | None = None,
) -> list[str]:
    """Every way the Bicep in ``infra`` falls short of the declared services, in words."""
    services = expected_services() if services is None else services
    all_queues = expected_queues() if all_queues is None else all_queues
    problems: list[str] = []
    catalog = json.loads((infra / "app" / "catalog.json").read_text(encoding="utf-8"))
    for service in services:
        entry = catalog.get("services", {}).get(service.name)
        if entry != service.catalog_entry():
            problems.append(
                f"infra/app/catalog.json: service {service.name} is {entry}, expected "
                f"{service.catalog_entry()} (run python -m orders.generate)"
            )
    created = created_queues(infra)
    for queue in all_queues:
        if queue not in created:
            problems.append(f"infra/app/servicebus.bicep: queue {queue} is not created")
    for queue in sorted(set(created) - set(all_queues)):
        problems.append(f"infra/app/servicebus.bicep: queue {queue} is created but no workflow uses it")
    settings = app_settings(infra)
    for service in services:
        if settings.get(service.url_setting) != SIMULATORS_URL:
            problems.append(
                f"infra/app/function-app.bicep: app setting {service.url_setting} of service {service.name} "
                f"is {settings.get(service.url_setting)!r}, expected the hosted simulators' URL"
            )
    watched = dead_letter_alert_queues(infra)
    for queue in all_queues:
        if "*" not in watched and queue not in watched:
            problems.append(f"infra/app/alerts.bicep: the dead-letter alert does not watch queue {queue}")
    return problems


def parameter_problems(infra: Path, parameters: dict[str, str | None] | None = None) -> list[str]:
    """Every way ``main.bicep``'s parameters and its parameters file disagree with ``MAIN_PARAMETERS``."""
    parameters = MAIN_PARAMETERS if parameters is None else parameters
    taken = parse_file(infra / "main.bicep").params
    fed = json.loads((infra / "main.parameters.json").read_text(encoding="utf-8"))["parameters"]
    problems: list[str] = []
    for name, param in taken.items():
        if name not in parameters:
            problems.append(
                f"infra/main.bicep: parameter {name} is not in tests/infra/deployment.py's MAIN_PARAMETERS: "
                "feed it from infra/main.parameters.json or list it as left to its default"
            )
            continue
        variable = parameters[name]
        if variable is None and name in fed:
            problems.append(f"infra/main.parameters.json: {name} is listed as left to its default")
        elif variable is None and param.default is None:
            problems.append(
                f"infra/main.bicep: {name} has no default and main.parameters.json does not feed it"
            )
        elif variable is not None and fed.get(name) != {"value": variable}:
            problems.append(
                f"infra/main.parameters.json: {name} is {fed.get(name)}, expected {{'value': {variable!r}}}"
            )
    for name in sorted(set(parameters) - set(taken)):
        problems.append(f"infra/main.bicep: takes no parameter {name} (listed in MAIN_PARAMETERS)")
    for name in sorted(set(fed) - set(taken)):
        problems.append(f"infra/main.parameters.json: {name} is not a parameter of infra/main.bicep")
    return problems
