"""The OpenAPI document: every route of function_app.py and nothing else, built from the API's models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis

from devhost.functions import load_functions
from orders import access, openapi
from orders.models import ErrorBody, ExtendRequest, OrderStatus

ROOT = Path(__file__).resolve().parents[2]
# Forwarders to the remote-service simulators, registered only with ENABLE_SIMULATORS=true for a demo
# deployment: they are not part of this API (the simulators document their own routes).
DEMO_ONLY = {"simulators", "simulators_control"}


def http_routes() -> dict[tuple[str, str], str]:
    """(METHOD, /api/route) -> function name, for every HTTP function of function_app.py."""
    found: dict[tuple[str, str], str] = {}
    for spec in load_functions(ROOT):
        if spec.route is None or spec.name in DEMO_ONLY:
            continue
        for method in spec.methods or ():
            found[(method.upper(), f"/api/{spec.route}")] = spec.name
    return found


def operation(method: str, path: str) -> dict[str, Any]:
    return openapi.document()["paths"][path][method.lower()]


def test_the_document_has_every_route_of_the_app_and_no_other() -> None:
    routes = http_routes()
    documented = openapi.routes()
    assert set(routes) == documented, (
        f"in the app only: {set(routes) - documented}; documented only: {documented - set(routes)}"
    )
    for (method, path), name in routes.items():
        assert operation(method, path)["operationId"] == name


def test_the_document_is_valid_openapi_3_1() -> None:
    schema = schemathesis.openapi.from_dict(openapi.document())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(openapi.OPERATIONS)


def test_schemas_come_from_the_models_the_code_uses() -> None:
    schemas = openapi.document()["components"]["schemas"]
    assert schemas["ExtendRequest"]["properties"]["seconds"]["maximum"] == 86_400
    assert set(schemas["OrderStatus"]["properties"]) == {
        f.alias or n for n, f in OrderStatus.model_fields.items()
    }
    assert set(schemas["ErrorBody"]["properties"]) == set(ErrorBody.model_fields)
    assert schemas["ExtendRequest"]["additionalProperties"] is False
    assert ExtendRequest.model_fields["seconds"].is_required()


def test_etags_if_match_and_errors_are_documented() -> None:
    assert "ETag" in operation("GET", "/api/orders/{orderId}")["responses"]["200"]["headers"]
    for op in openapi.OPERATIONS:
        entry = operation(op.method, f"/api{op.path}")
        for status, response in entry["responses"].items():
            if int(status) >= 400 and status != "401":  # 401 is the host's, before the function runs
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }
        if op.tag == "operator" and op.method == "post":
            names = {p["name"] for p in entry["parameters"]}
            assert "If-Match" in names
            assert {"202", "409", "412", "428"} <= set(entry["responses"])
            assert "ETag" in entry["responses"]["202"]["headers"]
        public = op.allowed == access.ANYONE
        assert ("401" in entry["responses"]) == ("403" in entry["responses"]) == (not public)
        assert (entry["security"] == []) == public
