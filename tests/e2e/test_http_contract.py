"""The HTTP contract, over real HTTP through orders-devhost: status codes, bodies, and nothing written
for a rejected request."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import DEFAULT_WORKFLOW, LocalStack, another_order, new_order


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def fresh_id() -> str:
    return f"http-{uuid.uuid4().hex[:10]}"


def assert_not_written(stack: LocalStack, order_id: str) -> None:
    assert_error(stack.api.get(f"/api/orders/{order_id}"), 404, "NotFound")


def test_submit_returns_202_with_location_and_status_url(stack: LocalStack) -> None:
    order_id = fresh_id()
    # The local stack sets PUBLIC_BASE_URL to its own address: the status URL starts with it, whatever
    # Host says.
    response = stack.api.post("/api/orders", json=new_order(order_id), headers={"Host": "evil.example"})
    assert response.status_code == 202
    body = response.json()
    # The submission claims the order itself and sends its first step before it answers.
    assert body["orderId"] == order_id and body["processState"] == "Processing"
    assert body["statusUrl"] == f"{stack.devhost.api_url}/api/orders/{order_id}"
    assert response.headers["location"] == body["statusUrl"]
    status = stack.api.get(f"/api/orders/{order_id}").json()
    assert set(status) >= {
        "orderId",
        "processState",
        "failureCount",
        "lockedBy",
        "completeBy",
        "createdAt",
        "updatedAt",
        "steps",
    }
    assert set(status["steps"][0]) >= {"name", "state", "attempts", "completeBy", "lastError"}


def test_an_order_without_an_id_gets_one(stack: LocalStack) -> None:
    response = stack.api.post("/api/orders", json=new_order())
    assert response.status_code == 202
    assert stack.api.get(f"/api/orders/{response.json()['orderId']}").status_code == 200


def test_the_same_order_again_is_not_duplicated_and_another_body_conflicts(stack: LocalStack) -> None:
    order_id = fresh_id()
    assert stack.api.post("/api/orders", json=new_order(order_id)).status_code == 202
    again = stack.api.post("/api/orders", json=new_order(order_id))
    assert again.status_code in (200, 202) and again.json()["orderId"] == order_id
    assert_error(stack.api.post("/api/orders", json=another_order(order_id)), 409, "Conflict")
    assert stack.wait_terminal(order_id)["processState"] == "Processed"
    assert all(e["applied"] == 1 for e in stack.entries(order_id).values())


def _violations() -> list[dict[str, Any]]:
    """Bodies the default workflow's input model refuses, whatever it declares: a field it does not
    declare, and each required field left out or of no JSON type it could take. (The example input models'
    own rules are tested without the stack, in tests/examples.)"""
    model = DEFAULT_WORKFLOW.input
    assert model is not None
    required = [f.alias or n for n, f in model.model_fields.items() if f.is_required()]
    return [
        {"unexpected": True},
        *({field: MISSING} for field in required),
        *({field: [[]]} for field in required),
    ]


class _Missing:
    """A field to leave out of the body."""

    def __repr__(self) -> str:
        return "missing"


MISSING = _Missing()


@pytest.mark.parametrize("change", _violations(), ids=repr)
def test_schema_violations_are_400_with_details_and_write_nothing(
    stack: LocalStack, change: dict[str, Any]
) -> None:
    order_id = fresh_id()
    body = new_order(order_id, **change)
    body = {field: value for field, value in body.items() if value is not MISSING}
    error = assert_error(stack.api.post("/api/orders", json=body), 400, "ValidationFailed")
    assert error["details"]
    assert_not_written(stack, order_id)


@pytest.mark.parametrize("bad_id", ["has space", "x" * 65, "semi;colon", ""])
def test_invalid_order_ids_are_refused(stack: LocalStack, bad_id: str) -> None:
    body = new_order()
    body["orderId"] = bad_id
    assert_error(stack.api.post("/api/orders", json=body), 400, "ValidationFailed")


def test_invalid_json_is_400(stack: LocalStack) -> None:
    response = stack.api.post(
        "/api/orders", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "InvalidJson")
    response = stack.api.post("/api/orders", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert_error(response, 400, "ValidationFailed")


def test_deep_nesting_and_repeated_keys_are_400_naming_no_exception_and_write_nothing(
    stack: LocalStack,
) -> None:
    order_id = fresh_id()
    body = json.dumps(new_order(order_id))
    deep = body[:-1] + ', "padding": ' + "[" * 10_000 + "]" * 10_000 + "}"
    twice = body[:-1] + f', "orderId": "{fresh_id()}"}}'
    json_type = {"content-type": "application/json"}
    for content in (deep, twice):
        response = stack.api.post("/api/orders", content=content, headers=json_type)
        error = assert_error(response, 400, "InvalidJson")
        assert "Error" not in error["message"], error
    assert '"orderId"' in error["message"]
    assert_not_written(stack, order_id)


def test_a_body_over_64_kib_is_413_and_writes_nothing(stack: LocalStack) -> None:
    order_id = fresh_id()
    body = new_order(order_id, padding="c" * (65 * 1024))  # refused for its size before anything else
    response = stack.api.post(
        "/api/orders", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert_error(response, 413, "PayloadTooLarge")
    assert_not_written(stack, order_id)


def test_wrong_content_type_is_415_and_writes_nothing(stack: LocalStack) -> None:
    order_id = fresh_id()
    response = stack.api.post(
        "/api/orders", content=json.dumps(new_order(order_id)), headers={"content-type": "text/plain"}
    )
    assert_error(response, 415, "UnsupportedMediaType")
    assert_not_written(stack, order_id)


def test_unknown_order_is_404(stack: LocalStack) -> None:
    assert_error(stack.api.get("/api/orders/no-such-order"), 404, "NotFound")
    tagged = {"if-match": '"any"'}
    assert_error(stack.api.post("/api/orders/no-such-order/resubmit", headers=tagged), 404, "NotFound")
    assert_error(stack.api.post("/api/orders/no-such-order/cancel", headers=tagged), 404, "NotFound")
    assert_error(stack.api.get("/api/orders/no-such-order/audit"), 404, "NotFound")


def test_resubmit_or_cancel_in_the_wrong_state_is_409(stack: LocalStack) -> None:
    order_id = stack.submit(fresh_id())
    assert_error(stack.act(order_id, "resubmit"), 409, "InvalidState")
    assert stack.wait_terminal(order_id)["processState"] == "Processed"
    assert_error(stack.act(order_id, "cancel"), 409, "InvalidState")


def test_list_by_state_pages_with_a_continuation_token(stack: LocalStack) -> None:
    ids = [stack.submit(fresh_id()) for _ in range(5)]
    for order_id in ids:
        stack.wait_terminal(order_id)
    seen: list[str] = []
    token = None
    while True:
        params = {
            "processState": "Processed",
            "pageSize": "2",
            **({"continuationToken": token} if token else {}),
        }
        response = stack.api.get("/api/orders", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) <= 2
        assert all(item["processState"] == "Processed" for item in page["items"])
        seen.extend(item["orderId"] for item in page["items"])
        token = page["continuationToken"]
        if token is None:
            break
    assert set(ids) <= set(seen) and len(seen) == len(set(seen))
    assert_error(stack.api.get("/api/orders", params={"processState": "Nope"}), 400, "ValidationFailed")
    assert_error(
        stack.api.get("/api/orders", params={"processState": "Pending", "pageSize": "0"}),
        400,
        "ValidationFailed",
    )
    bad_token = {"processState": "Pending", "continuationToken": "!!"}
    assert_error(stack.api.get("/api/orders", params=bad_token), 400, "ValidationFailed")


def test_health(stack: LocalStack) -> None:
    response = stack.api.get("/api/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_unknown_route_and_method(stack: LocalStack) -> None:
    assert stack.api.get("/api/nothing-here").status_code == 404
    assert stack.api.delete("/api/orders").status_code in (404, 405)
