"""App Service authentication as the devhost plays it: clients' principal headers removed unless trusted,
the platform's own set for an identity signed in by key or by the sign-in page's session cookie; and the
settings orders-devhost gives its workers per auth mode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import httpx
import pytest

from devhost import stack
from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec, describe
from devhost.http_host import MAX_REQUEST_BODY_BYTES, SESSION_COOKIE, HttpHost, Identity, PlatformAuth
from devhost.language_worker import LanguageWorker
from devhost.worker import platform_auth
from orders.access import AccessSettings, Role, authenticate
from tests.devhost import inline_app

OPERATOR = Identity("operator (devhost)", "00000000-0000-0000-0000-0000000000aa", ("Orders.Operator",))
FORGED = OPERATOR.headers()


def echo_app() -> func.FunctionApp:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="echo", methods=["GET", "POST"])
    def echo(req: func.HttpRequest) -> func.HttpResponse:
        wanted = ("x-ms-", "x-functions")
        seen = {k.lower(): v for k, v in req.headers.items() if k.lower().startswith(wanted)}
        return func.HttpResponse(json.dumps(seen), mimetype="application/json")

    return app


Served = tuple[list[FunctionSpec], LanguageWorker]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The echo app, indexed by azure-functions-runtime."""
    inline_app.write_app(tmp_path / "app", echo_app())
    worker = LanguageWorker(tmp_path / "app")
    specs = [describe(metadata) for metadata in asyncio.run(worker.start())]
    yield specs, worker
    worker.stop()


def request(host: HttpHost, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=host.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.request(method, url, **kwargs)

    return asyncio.run(send())


def host(served: Served, platform: PlatformAuth | None) -> HttpHost:
    specs, worker = served
    return HttpHost(specs, "api", worker, platform=platform)


def seen(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_without_the_platform_headers_pass_as_sent(served: Served) -> None:
    plain = host(served, None)
    assert seen(request(plain, "GET", "/api/echo", headers=FORGED))["x-ms-client-principal-name"] == (
        OPERATOR.name
    )


def test_the_platform_removes_a_clients_principal_headers(served: Served) -> None:
    platform = host(served, PlatformAuth({"op-key": OPERATOR}))
    assert seen(request(platform, "GET", "/api/echo", headers=FORGED)) == {}


def test_a_key_signs_its_identity_in_and_never_reaches_the_function(served: Served) -> None:
    platform = host(served, PlatformAuth({"op-key": OPERATOR}))
    headers = seen(request(platform, "GET", "/api/echo", headers={"x-functions-key": "op-key"}))
    assert "x-functions-key" not in headers and headers["x-ms-client-principal-id"] == OPERATOR.object_id
    # What the app makes of them: the operator, named by name and object id.
    caller = authenticate(headers, AccessSettings(platform_authentication=True))
    assert caller is not None and caller.roles == {Role.OPERATOR}
    assert caller.actor == f"user:{OPERATOR.name} oid:{OPERATOR.object_id}"
    # Another key (the submitter's) is the app's to check: it passes through.
    other = seen(request(platform, "GET", "/api/echo", headers={"x-functions-key": "submission"}))
    assert other == {"x-functions-key": "submission"}


def test_trusted_principal_headers_pass_as_if_the_platform_had_set_them(served: Served) -> None:
    trusting = host(served, PlatformAuth({}, trust_principal_headers=True))
    assert seen(request(trusting, "GET", "/api/echo", headers=FORGED)) == FORGED


def test_the_sign_in_page_starts_a_session_and_refuses_unknown_keys(served: Served) -> None:
    platform = host(served, PlatformAuth({"op-key": OPERATOR}))
    form = request(platform, "GET", "/.auth/login/aad?post_login_redirect_uri=/api/console")
    assert form.status_code == 200 and 'name="key"' in form.text and 'value="/api/console"' in form.text
    wrong = request(platform, "POST", "/.auth/login/aad", data={"key": "nope"})
    assert wrong.status_code == 401 and SESSION_COOKIE not in wrong.cookies
    signed_in = request(
        platform, "POST", "/.auth/login/aad", data={"key": "op-key", "post_login_redirect_uri": "/api/echo"}
    )
    assert signed_in.status_code == 302 and signed_in.headers["location"] == "/api/echo"
    cookie = signed_in.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    session = signed_in.cookies[SESSION_COOKIE]
    cookie_header = {"cookie": f"{SESSION_COOKIE}={session}"}
    assert session != "op-key"  # the cookie is a session, not the key
    headers = seen(request(platform, "GET", "/api/echo", headers=cookie_header))
    assert headers["x-ms-client-principal-name"] == OPERATOR.name
    out = request(platform, "GET", "/.auth/logout", headers=cookie_header)
    assert out.status_code == 302
    assert seen(request(platform, "GET", "/api/echo", headers=cookie_header)) == {}


def test_sign_in_redirects_only_to_this_hosts_paths(served: Served) -> None:
    platform = host(served, PlatformAuth({"op-key": OPERATOR}))
    for target in ("https://evil.example/x", "//evil.example/x", "javascript:alert(1)"):
        done = request(
            platform, "POST", "/.auth/login/aad", data={"key": "op-key", "post_login_redirect_uri": target}
        )
        assert done.headers["location"] == "/api/console", target


def test_the_sign_in_form_is_read_up_to_the_cap(served: Served) -> None:
    platform = host(served, PlatformAuth({"op-key": OPERATOR}))
    padded = {"key": "op-key", "padding": "x" * MAX_REQUEST_BODY_BYTES}
    refused = request(platform, "POST", "/.auth/login/aad", data=padded)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "PayloadTooLarge"
    assert SESSION_COOKIE not in refused.cookies


# ---- what orders-devhost gives its workers -------------------------------------------------------------
def test_open_is_the_default_and_roles_give_a_key_per_role() -> None:
    assert stack.build_parser().parse_args([]).auth == "open"
    assert stack.auth_settings("open", {}, False) == {"API_AUTH": "open"}
    keys = stack.role_keys()
    assert set(keys) == {"submitter", "reader", "approver", "operator"} and len(set(keys.values())) == 4
    settings = stack.auth_settings("roles", keys, trust_principal_headers=False)
    assert settings["API_AUTH"] == "roles" and settings["SUBMISSION_KEY"] == keys["submitter"]
    assert settings["WEBSITE_AUTH_ENABLED"] == "true"
    played = platform_auth(settings)
    assert played is not None and not played.trust_principal_headers
    reader, operator = played.identity_for_key(keys["reader"]), played.identity_for_key(keys["operator"])
    assert reader is not None and reader.app_roles == ("Orders.Reader",)
    assert operator is not None and operator.app_roles == ("Orders.Operator",)
    assert played.identity_for_key(keys["submitter"]) is None  # the app checks that one
    trusting = platform_auth(stack.auth_settings("roles", keys, trust_principal_headers=True))
    assert trusting is not None and trusting.trust_principal_headers


def test_the_platform_is_played_only_when_the_app_is_told_it_is_on() -> None:
    assert platform_auth({}) is None
    assert platform_auth({"WEBSITE_AUTH_ENABLED": "false", "DEVHOST_IDENTITIES": "{}"}) is None
    with pytest.raises(ConfigurationError):
        platform_auth({"WEBSITE_AUTH_ENABLED": "true", "DEVHOST_IDENTITIES": "[1]"})


def test_trusting_headers_needs_the_roles(capsys: pytest.CaptureFixture[str]) -> None:
    assert stack.main(["--trust-principal-headers"]) == 2
    assert "needs --auth roles" in capsys.readouterr().err
