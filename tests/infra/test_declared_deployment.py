"""The Bicep and its parameters file against the declaration, from one list (``tests/infra/deployment.py``):
every declared service's queue, URL setting and dead-letter alert, every parameter ``main.bicep`` takes.

Each check is also run on a copy of ``infra/`` with one thing taken out, and must name it: a check that
cannot fail proves nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orders.catalog import SERVICES
from tests.infra.deployment import (
    MAIN_PARAMETERS,
    app_settings,
    created_queues,
    dead_letter_alert_queues,
    expected_queues,
    expected_services,
    parameter_problems,
    service_problems,
)

INFRA = Path(__file__).resolve().parents[2] / "infra"
# The service the broken copies lose: the last declared (a service just added, in a team's first change).
SERVICE = expected_services()[-1]


@pytest.fixture
def infra(tmp_path: Path) -> Path:
    """A copy of ``infra/`` to break."""
    return Path(shutil.copytree(INFRA, tmp_path / "infra"))


def edit_json(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Rewrite a JSON file through ``change(content)``, which edits it in place."""
    content = json.loads(path.read_text(encoding="utf-8"))
    change(content)
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def replace_text(path: Path, old: str, new: str) -> None:
    """Replace exactly one occurrence of ``old`` in a file."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name}: {old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new), encoding="utf-8")


# ---- the repository's infra agrees with the declaration -------------------------------------------------
def test_the_list_holds_every_declared_service() -> None:
    assert [s.name for s in expected_services()] == [s.name for s in SERVICES]
    assert {s.queue for s in expected_services()} <= set(expected_queues())


def test_every_declared_service_has_its_queue_url_setting_and_alert() -> None:
    assert service_problems(INFRA) == []
    # What the checks read, seen to hold something: the evaluations are not vacuous.
    assert created_queues(INFRA) == expected_queues()
    assert {s.url_setting for s in expected_services()} <= set(app_settings(INFRA))
    assert dead_letter_alert_queues(INFRA)


def test_every_parameter_of_main_bicep_is_fed_or_left_to_its_default() -> None:
    assert parameter_problems(INFRA) == []
    fed = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert set(fed) == {name for name, variable in MAIN_PARAMETERS.items() if variable is not None}


# ---- each check fails when its thing is missing ------------------------------------------------------------
def test_a_service_missing_from_the_generated_catalog_is_named(infra: Path) -> None:
    edit_json(infra / "app" / "catalog.json", lambda c: c["services"].pop(SERVICE.name))
    problems = "\n".join(service_problems(infra))
    assert f"catalog.json: service {SERVICE.name} is None" in problems
    # Its URL setting goes with it: the app settings are built from the catalog's services.
    assert f"app setting {SERVICE.url_setting} of service {SERVICE.name} is None" in problems


def test_a_queue_the_bicep_does_not_create_is_named(infra: Path) -> None:
    edit_json(
        infra / "app" / "catalog.json",
        lambda c: c.update(queues=[q for q in c["queues"] if q["name"] != SERVICE.queue]),
    )
    assert service_problems(infra) == [f"infra/app/servicebus.bicep: queue {SERVICE.queue} is not created"]


def test_a_queue_no_workflow_uses_is_named(infra: Path) -> None:
    others = [s for s in expected_services() if s.name != SERVICE.name]
    without = [q for q in expected_queues() if q != SERVICE.queue]
    assert service_problems(infra, others, without) == [
        f"infra/app/servicebus.bicep: queue {SERVICE.queue} is created but no workflow uses it"
    ]


def test_url_settings_the_function_app_does_not_set_are_named(infra: Path) -> None:
    replace_text(
        infra / "app" / "function-app.bicep",
        "properties: union(appSettings, serviceUrlSettings, waitSettings)",
        "properties: union(appSettings, waitSettings)",
    )
    problems = service_problems(infra)
    assert len(problems) == len(SERVICES)
    assert (
        f"infra/app/function-app.bicep: app setting {SERVICE.url_setting} of service {SERVICE.name} is None"
        in (problems[-1])
    )


def test_a_dead_letter_alert_that_misses_a_queue_is_named(infra: Path) -> None:
    watched = [q for q in expected_queues() if q != SERVICE.queue]
    values = "\n".join(f"                '{queue}'" for queue in watched)
    replace_text(infra / "app" / "alerts.bicep", "                '*'", values)
    assert dead_letter_alert_queues(infra) == watched
    assert service_problems(infra) == [
        f"infra/app/alerts.bicep: the dead-letter alert does not watch queue {SERVICE.queue}"
    ]


def test_a_required_parameter_the_file_does_not_feed_is_named(infra: Path) -> None:
    edit_json(infra / "main.parameters.json", lambda c: c["parameters"].pop("environmentName"))
    assert parameter_problems(infra) == [
        "infra/main.parameters.json: environmentName is None, expected {'value': '${AZURE_ENV_NAME}'}"
    ]


def test_a_fed_parameter_with_another_variable_is_named(infra: Path) -> None:
    edit_json(infra / "main.parameters.json", lambda c: c["parameters"].update(serviceUrls={"value": "x"}))
    assert parameter_problems(infra) == [
        "infra/main.parameters.json: serviceUrls is {'value': 'x'}, expected {'value': '${SERVICE_URLS=}'}"
    ]


def test_a_parameter_the_file_feeds_but_main_bicep_does_not_take_is_named(infra: Path) -> None:
    edit_json(
        infra / "main.parameters.json",
        lambda c: c["parameters"].update({f"{SERVICE.name}ServiceUrl": {"value": "${URL=}"}}),
    )
    assert parameter_problems(infra) == [
        f"infra/main.parameters.json: {SERVICE.name}ServiceUrl is not a parameter of infra/main.bicep"
    ]


def test_a_new_parameter_of_main_bicep_must_be_listed(infra: Path) -> None:
    replace_text(
        infra / "main.bicep",
        "param serviceUrls string = ''",
        "param serviceUrls string = ''\n\n@description('A new one.')\nparam newSetting string = 'x'",
    )
    (problem,) = parameter_problems(infra)
    assert problem.startswith("infra/main.bicep: parameter newSetting is not in")


def test_a_parameter_left_to_its_default_must_have_one(infra: Path) -> None:
    parameters = {**MAIN_PARAMETERS, "environmentName": None}
    edit_json(infra / "main.parameters.json", lambda c: c["parameters"].pop("environmentName"))
    assert parameter_problems(infra, parameters) == [
        "infra/main.bicep: environmentName has no default and main.parameters.json does not feed it"
    ]
    assert parameter_problems(INFRA, parameters) == [
        "infra/main.parameters.json: environmentName is listed as left to its default"
    ]
