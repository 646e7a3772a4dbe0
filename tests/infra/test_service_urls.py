"""SERVICE_URLS in Azure: the Function App's app settings as infra/app/function-app.bicep computes them
from the one parameter and the generated catalog, evaluated offline (tests/infra/bicep_eval.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bicep_contracts.syntax import Obj, body_object
from orders.settings import SERVICE_URL_SETTINGS, SETTING_NAMES
from tests.infra.bicep_eval import ArmError, Evaluator

FUNCTION_APP = Path(__file__).resolve().parents[2] / "infra" / "app" / "function-app.bicep"
SIMULATORS = "https://func-x.azurewebsites.net/api/sim"
NAMES = list(SERVICE_URL_SETTINGS)


def app_settings(service_urls: str, public_base_url: str = "") -> dict[str, Any]:
    """The appsettings the site module receives for this SERVICE_URLS (and PUBLIC_BASE_URL)."""
    evaluator = Evaluator(
        FUNCTION_APP,
        {
            "name": "func-x",
            "serviceUrls": service_urls,
            "simulatorsKey": "the-key",
            "stateShards": 8,
            "authClientId": "",
            "publicBaseUrl": public_base_url,
        },
    )
    site = body_object(evaluator.file.modules["site"].body)
    assert site is not None
    params = site.get("params")
    assert isinstance(params, Obj)
    configs = params.get("configs")
    assert configs is not None
    (config,) = evaluator.eval(configs)
    assert config["name"] == "appsettings"
    settings = config["properties"]
    assert all(isinstance(v, str) for v in settings.values()), "app settings are strings"
    return settings


def urls(settings: dict[str, Any]) -> dict[str, str]:
    return {name: settings[setting] for name, setting in SERVICE_URL_SETTINGS.items()}


def test_empty_puts_every_service_on_the_hosted_simulators() -> None:
    settings = app_settings("")
    assert urls(settings) == dict.fromkeys(NAMES, SIMULATORS)
    assert (settings["ENABLE_SIMULATORS"], settings["SIMULATORS_KEY"]) == ("true", "the-key")
    expected = set(SETTING_NAMES) - {"STATE_STORE_CONNECTION"}
    assert expected <= set(settings), sorted(expected - set(settings))


def test_every_service_given_a_url_switches_the_simulators_off() -> None:
    # a URL may carry '=' (a query string) and a path; spaces around the pairs are dropped
    given = {name: f"https://{name}.example.com/api?code=a=b&x=1" for name in NAMES}
    settings = app_settings(" , ".join(f"{name}={url}" for name, url in given.items()) + ",")
    assert urls(settings) == given
    assert (settings["ENABLE_SIMULATORS"], settings["SIMULATORS_KEY"]) == ("false", "")


def test_a_service_left_out_or_left_empty_uses_the_simulators() -> None:
    first, second, *others = NAMES
    settings = app_settings(f"{first}=https://one.example.com,{second}=")
    assert urls(settings) == {first: "https://one.example.com", second: SIMULATORS} | dict.fromkeys(
        others, SIMULATORS
    )
    assert settings["ENABLE_SIMULATORS"] == "true"


def test_a_url_is_carried_exactly_through_the_json_it_is_built_with() -> None:
    tricky = 'https://x.example.com/a"b\\c/é?q={"k":1}'
    settings = app_settings(f"{NAMES[0]}={tricky}")
    assert urls(settings)[NAMES[0]] == tricky


@pytest.mark.parametrize("value", ["nosuchservice=https://x.example.com", "https://x.example.com"])
def test_a_name_no_service_has_stops_the_deployment_naming_it(value: str) -> None:
    with pytest.raises(ArmError) as error:
        app_settings(value)
    message = str(error.value)
    assert f"property '{value.split('=')[0]}' doesn't exist" in message
    assert all(name in message for name in NAMES), "ARM lists the declared names"


def test_the_catalog_the_settings_come_from_is_the_generated_one() -> None:
    catalog = json.loads((FUNCTION_APP.parent / "catalog.json").read_text())
    assert set(catalog["services"]) == set(NAMES)


def test_status_urls_start_with_the_apps_own_address_unless_another_is_given() -> None:
    # Never the request's Host header: the app builds them from this setting alone.
    assert app_settings("")["PUBLIC_BASE_URL"] == "https://func-x.azurewebsites.net"
    given = app_settings("", public_base_url="https://orders.example.com")
    assert given["PUBLIC_BASE_URL"] == "https://orders.example.com"
