"""App Service authentication in Azure as infra/app/function-app.bicep configures it, evaluated offline
(tests/infra/bicep_eval.py): absent without an app registration, Entra ID with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bicep_contracts.syntax import Obj, body_object
from tests.infra.bicep_eval import Evaluator

FUNCTION_APP = Path(__file__).resolve().parents[2] / "infra" / "app" / "function-app.bicep"
CLIENT_ID = "11111111-2222-3333-4444-555555555555"


def configs(auth_client_id: str) -> list[dict[str, Any]]:
    """The site module's configs for this client id."""
    evaluator = Evaluator(
        FUNCTION_APP,
        {
            "name": "func-x",
            "serviceUrls": "",
            "simulatorsKey": "k",
            "stateShards": 8,
            "authClientId": auth_client_id,
        },
    )
    site = body_object(evaluator.file.modules["site"].body)
    assert site is not None
    params = site.get("params")
    assert isinstance(params, Obj)
    found = params.get("configs")
    assert found is not None
    return list(evaluator.eval(found))


def test_without_an_app_registration_only_the_app_settings_are_deployed() -> None:
    assert [c["name"] for c in configs("")] == ["appsettings"]


def test_with_one_people_sign_in_with_entra_id_and_anonymous_calls_reach_the_app() -> None:
    settings, auth = configs(CLIENT_ID)
    assert settings["name"] == "appsettings" and settings["retainCurrentAppSettings"] is True
    assert auth["name"] == "authsettingsV2"
    properties = auth["properties"]
    assert properties["platform"]["enabled"] is True
    assert properties["globalValidation"]["unauthenticatedClientAction"] == "AllowAnonymous"
    entra = properties["identityProviders"]["azureActiveDirectory"]
    assert entra["registration"] == {
        "clientId": CLIENT_ID,
        "openIdIssuer": "https://login.microsoftonline.com/00000000-0000-0000-0000-0000000000te/v2.0",
    }
    assert entra["validation"]["allowedAudiences"] == [f"api://{CLIENT_ID}", CLIENT_ID]
