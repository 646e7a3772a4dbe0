"""Who may do what: the route -> roles mapping against the OpenAPI document and the app, who a request
comes from (principal headers only when the platform's authentication is on, the submission key), and
the refusals (401 without a credential, 403 without the role)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orders import openapi, routes
from orders.access import ANYONE, SIGNED, AccessSettings, Caller, Role, authenticate, check
from orders.identity import principal_of

ROOT = Path(__file__).resolve().parents[2]
OBJECT_ID = "00000000-0000-0000-0000-00000000a11c"
KEY = "the-submission-key"


def principal(*roles: str, name: str = "alice@contoso.com", role_typ: str = "roles") -> dict[str, str]:
    """The headers App Service authentication sets for a signed-in principal with these app roles."""
    claims = [{"typ": role_typ, "val": r} for r in roles]
    claims += [
        {"typ": "name", "val": name},
        {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": OBJECT_ID},
    ]
    body = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": role_typ}
    return {
        "x-ms-client-principal": base64.b64encode(json.dumps(body).encode()).decode(),
        "x-ms-client-principal-name": name,
        "x-ms-client-principal-id": OBJECT_ID,
        "x-ms-client-principal-idp": "aad",
    }


# Who may call each route, as orders.routes declares it.
RULES = {route.key: route.allowed for route in routes.ROUTES}
PLATFORM = AccessSettings(platform_authentication=True, submission_key=KEY)
NO_PLATFORM = AccessSettings(platform_authentication=False, submission_key=KEY)


# ---- the rules ---------------------------------------------------------------------------------------
def test_each_role_has_its_routes() -> None:
    submitter = {
        route for route, rule in RULES.items() if not isinstance(rule, str) and Role.SUBMITTER in rule
    }
    assert submitter == {
        ("POST", "/api/orders"),
        ("GET", "/api/orders/{orderId}"),
        ("POST", "/api/orders/{orderId}/update"),  # a storefront corrects its own orders
    }
    for (method, path), rule in RULES.items():
        if rule == ANYONE:
            assert (method, path) == ("GET", "/api/health")
            continue
        if rule == SIGNED:  # no role can send a service's callback: only its signature counts
            assert (method, path) == ("POST", "/api/callbacks/{service}")
            continue
        assert Role.OPERATOR in rule, path  # the operator may do everything
        assert (Role.READER in rule) == (method == "GET"), (method, path)  # a reader every GET, no POST


def test_the_documentation_names_each_operations_roles_from_the_mapping() -> None:
    for op in routes.ROUTES:
        entry = openapi.document()["paths"][f"/api{op.path}"][op.method]
        rule = op.allowed
        if rule == ANYONE:
            assert "x-roles" not in entry and entry["security"] == []
        elif rule == SIGNED:
            assert entry["x-roles"] == [] and entry["security"] == []
        else:
            assert set(entry["x-roles"]) == {r.value for r in rule}
            schemes = {name for requirement in entry["security"] for name in requirement}
            assert schemes == ({"entraId", "submissionKey"} if Role.SUBMITTER in rule else {"entraId"})


def test_a_route_without_a_rule_cannot_be_looked_up() -> None:
    with pytest.raises(KeyError):
        routes.rule("DELETE", "/api/orders/{orderId}")


# ---- who is asking -------------------------------------------------------------------------------------
def test_principal_headers_count_only_when_the_platform_authenticates() -> None:
    operator = authenticate(principal("Orders.Operator"), PLATFORM)
    assert operator is not None and operator.roles == {Role.OPERATOR}
    assert operator.actor == f"user:alice@contoso.com oid:{OBJECT_ID}"
    # The same headers with the platform's authentication off: anyone could have written them.
    assert authenticate(principal("Orders.Operator"), NO_PLATFORM) is None
    assert authenticate(principal("Orders.Operator"), AccessSettings()) is None


def test_app_roles_map_to_roles_and_unknown_ones_to_none() -> None:
    both = authenticate(principal("Orders.Reader", "Orders.Operator", "Other.Role"), PLATFORM)
    assert both is not None and both.roles == {Role.READER, Role.OPERATOR}
    nothing = authenticate(principal("Other.Role"), PLATFORM)
    assert nothing is not None and nothing.roles == frozenset()  # signed in, but no role here: 403
    legacy = authenticate(
        principal("Orders.Reader", role_typ="http://schemas.microsoft.com/ws/2008/06/identity/claims/role"),
        PLATFORM,
    )
    assert legacy is not None and legacy.roles == {Role.READER}


def test_a_principal_header_that_does_not_decode_is_no_principal() -> None:
    assert principal_of({"x-ms-client-principal": "%%%not base64%%%"}) is None
    assert principal_of({"x-ms-client-principal": base64.b64encode(b"[1, 2]").decode()}) is None
    assert principal_of({}) is None
    named = principal_of({"x-ms-client-principal-name": "bob"})
    assert named is not None and named.actor == "user:bob" and named.app_roles == frozenset()


def test_the_submission_key_is_worth_the_submitter_role_only() -> None:
    keyed = authenticate({"x-functions-key": KEY}, PLATFORM)
    assert keyed is not None and keyed.roles == {Role.SUBMITTER} and keyed.actor == "key:submission"
    assert authenticate({"x-functions-key": "wrong"}, PLATFORM) is None
    assert authenticate({"x-functions-key": KEY}, AccessSettings(platform_authentication=True)) is None
    assert authenticate({"x-functions-key": ""}, AccessSettings(submission_key="")) is None
    # A principal and the key together: both roles, named as the principal.
    both = authenticate({**principal("Orders.Reader"), "x-functions-key": KEY}, PLATFORM)
    assert both is not None and both.roles == {Role.SUBMITTER, Role.READER}
    assert both.actor.startswith("user:alice")


def test_a_storefront_key_is_the_submitter_role_within_that_storefront_only() -> None:
    env = {
        "STOREFRONTS": "web, my-shop",
        "STOREFRONT_WEB_KEY": "web-key",
        "STOREFRONT_MY_SHOP_KEY": "shop-key",
        "SUBMISSION_KEY": KEY,
    }
    settings = AccessSettings.from_environment(env)
    assert settings.storefront_keys == {"web": "web-key", "my-shop": "shop-key"}
    web = authenticate({"x-functions-key": "web-key"}, settings)
    assert web is not None and (web.roles, web.storefront, web.actor) == (
        {Role.SUBMITTER},
        "web",
        "storefront:web",
    )
    shop = authenticate({"x-functions-key": "shop-key"}, settings)
    assert shop is not None and shop.storefront == "my-shop"
    shared = authenticate({"x-functions-key": KEY}, settings)
    assert shared is not None and shared.storefront is None  # the shared key: orders of no storefront
    # A storefront without its key yet cannot sign in; one not declared is not read at all.
    assert AccessSettings.from_environment({"STOREFRONTS": "web"}).storefront_keys == {}
    assert AccessSettings.from_environment({"STOREFRONT_WEB_KEY": "k"}).storefront_keys == {}
    for bad in ("Web", "web,web", "9lives", "a" * 25, "we.b"):
        with pytest.raises(ValueError, match="STOREFRONTS"):
            AccessSettings.from_environment({"STOREFRONTS": bad})


def test_open_lets_everyone_do_everything_but_not_on_app_service() -> None:
    opened = authenticate({}, AccessSettings(open=True))
    assert opened is not None and opened.roles == frozenset(Role) and opened.actor == "local"
    assert AccessSettings.from_environment({"API_AUTH": "open"}).open
    assert not AccessSettings.from_environment({"API_AUTH": "open", "WEBSITE_INSTANCE_ID": "1"}).open
    assert not AccessSettings.from_environment({"API_AUTH": "open", "WEBSITE_SITE_NAME": "func-x"}).open
    core_tools = {"API_AUTH": "open", "WEBSITE_SITE_NAME": "x", "FUNCTIONS_CORETOOLS_ENVIRONMENT": "true"}
    assert AccessSettings.from_environment(core_tools).open
    assert not AccessSettings.from_environment({}).open  # the roles unless told otherwise


def test_settings_come_from_the_platform_and_the_app_settings() -> None:
    read = AccessSettings.from_environment({"WEBSITE_AUTH_ENABLED": "True", "SUBMISSION_KEY": "k"})
    assert read == AccessSettings(open=False, platform_authentication=True, submission_key="k")
    assert not AccessSettings.from_environment({"WEBSITE_AUTH_ENABLED": "False"}).platform_authentication
    assert AccessSettings.from_environment({"SUBMISSION_KEY": ""}).submission_key is None


# ---- refusals ------------------------------------------------------------------------------------------
def test_no_credential_is_401_and_the_wrong_role_403() -> None:
    operate = routes.rule("POST", "/api/orders/{orderId}/cancel")
    unknown = check(operate, None)
    assert unknown is not None and (unknown.status, unknown.code) == (401, "Unauthorized")
    reader = Caller(frozenset({Role.READER}), "user:r")
    refused = check(operate, reader)
    assert refused is not None and (refused.status, refused.code) == (403, "Forbidden")
    assert "operator" in refused.message and "reader" in refused.message
    assert check(routes.rule("GET", "/api/health"), None) is None
    assert check(operate, Caller(frozenset({Role.OPERATOR}), "user:o")) is None


# ---- the app's wiring ----------------------------------------------------------------------------------
# Runs in a child process (the app reads its settings at import): every HTTP function of function_app.py
# called without a credential, with a forged principal, with the submission key and as a reader. Only
# refusals are collected: they must be decided before anything else runs (no store is configured).
PROBE = """
import asyncio, base64, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from devhost.functions import describe
from devhost.language_worker import InvocationFailed, LanguageWorker
from devhost.protos import function_rpc_pb2 as protos

def principal(role):
    body = {"claims": [{"typ": "roles", "val": role}, {"typ": "name", "val": "p"}], "role_typ": "roles"}
    return {"x-ms-client-principal": base64.b64encode(json.dumps(body).encode()).decode(),
            "x-ms-client-principal-name": "p"}

async def main():
    worker = LanguageWorker(Path(sys.argv[1]))
    found = {}
    for spec in map(describe, await worker.start()):
        if spec.route is None or spec.name.startswith("simulators"):
            continue
        route = "/api/" + spec.route
        for who, headers in (("none", {}), ("forged", principal("Orders.Operator")),
                             ("submitter", {"x-functions-key": "probe-key"}),
                             ("reader", {**principal("Orders.Reader")})):
            if who == "reader" and sys.argv[2] != "platform":
                continue
            request = protos.RpcHttp(method=spec.methods[0], url="http://x" + route, headers=headers,
                                     body=protos.TypedData(bytes=b""),
                                     params={"orderId": "o-1", "step": "s", "queue": "q",
                                             "sequenceNumber": "1"})
            binding = protos.ParameterBinding(name=spec.arg_name, data=protos.TypedData(http=request))
            try:
                response = await worker.invoke(spec.function_id, [binding])
                status = int(response.return_value.http.status_code)
            except InvocationFailed:  # reached the layers below: not refused
                status = "through"
            found[spec.methods[0] + " " + route + " " + who] = status
    worker.stop()
    print(json.dumps(found))

asyncio.run(main())
"""


def probe(platform: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATE_STORE", "API_AUTH", "WEBSITE_"))}
    env.update({"SUBMISSION_KEY": "probe-key", **({"WEBSITE_AUTH_ENABLED": "true"} if platform else {})})
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), "platform" if platform else "off"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_every_route_of_the_app_is_behind_the_check() -> None:
    without, platform = probe(platform=False), probe(platform=True)
    for (method, path), rule in RULES.items():
        if isinstance(rule, str):  # anyone; or signed, which its handler checks (test_callbacks)
            continue
        assert without[f"{method} {path} none"] == 401, path
        assert without[f"{method} {path} forged"] == 401, path  # the platform did not set it
        keyed = without[f"{method} {path} submitter"]
        assert (keyed == 403) == (Role.SUBMITTER not in rule), (path, keyed)
        reader = platform[f"{method} {path} reader"]
        assert (reader == 403) == (Role.READER not in rule), (path, reader)
    assert without["GET /api/health none"] == 200


# ---- the operators' documentation ----------------------------------------------------------------------
def test_the_documented_table_of_who_may_call_what_is_the_mapping() -> None:
    text = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    section = text.split("### Who may call what", 1)[1].split("\n\n- ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented: dict[tuple[str, str], object] = {}
    for row in rows:
        route, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        method, path = route.strip("`").split(" ", 1)
        if cells[0].startswith("anyone"):
            documented[(method, path)] = ANYONE
        elif cells[0].startswith("signed"):
            documented[(method, path)] = SIGNED
        else:
            documented[(method, path)] = frozenset(
                role for role, cell in zip(Role, cells, strict=True) if cell == "yes"
            )
    assert [r.value for r in Role] == ["submitter", "reader", "approver", "operator"]  # the table's columns
    assert documented == RULES
