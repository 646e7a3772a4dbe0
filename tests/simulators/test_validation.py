"""Bad requests: a 400 with a JSON error, nothing applied and no fault drawn; unknown routes: JSON 404.

Most tests share one process (``shared_client``): none of them applies anything, so its ledger stays empty.
"""

from __future__ import annotations

import httpx
import pytest

from tests.simulators.helpers import (
    FINAL,
    FIRST,
    LAST,
    NO_CALLS,
    RESOURCE_IDS,
    RESOURCES,
    UNDO_ACTIONS,
    UNDOABLE,
    Service,
    apply,
    assert_error,
    ledger,
    other_undo_paths,
    set_faults,
    stats,
)


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_missing_idempotency_key_is_refused(shared_client: httpx.Client, service: Service) -> None:
    message = assert_error(
        shared_client.post(service.collection, json=service.body), 400, "InvalidIdempotencyKey"
    )
    assert "Idempotency-Key" in message
    assert ledger(shared_client)[service.name] == {}


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_idempotency_key_of_bad_length_is_refused(shared_client: httpx.Client, key: str) -> None:
    response = shared_client.post(FIRST.collection, json=FIRST.body, headers={"Idempotency-Key": key})
    assert_error(response, 400, "InvalidIdempotencyKey")
    assert ledger(shared_client)[FIRST.name] == {}


def test_compensation_key_longer_than_200_is_refused(shared_client: httpx.Client) -> None:
    assert_error(shared_client.post(FIRST.compensation_path("k" * 201)), 400, "InvalidIdempotencyKey")


def test_empty_compensation_key_is_refused(shared_client: httpx.Client) -> None:
    assert_error(shared_client.post(FIRST.compensation_path("")), 400, "InvalidIdempotencyKey")


BAD_UNDO_BODIES = [b"{", b"[]", b'"x"', b"{}", b'{"orderId": ""}', b'{"orderId": 7}']


def test_an_undo_body_that_names_no_order_is_refused_and_undoes_nothing(client: httpx.Client) -> None:
    """An undo may come without a body (as older callers sent it) but a body it carries is validated:
    with the resource's undo body model if it declares one, else it must name the order."""
    for service in UNDOABLE:
        key = f"key-{service.collection}"  # keys are per service, and a service may have several
        assert apply(client, service, key).status_code == 201
        calls = stats(client)[service.name]["calls"]
        for content in BAD_UNDO_BODIES:
            response = client.post(service.compensation_path(key), content=content)
            assert_error(response, 400, "InvalidBody")
        assert ledger(client)[service.name][key]["compensated"] == 0, service
        assert stats(client)[service.name]["calls"] == calls, "refused before it counts as a call"
        # Without a body it is undone.
        assert client.post(service.compensation_path(key)).status_code == 200
        assert ledger(client)[service.name][key]["compensated"] == 1, service


@pytest.mark.parametrize("content", [b"", b"{", b"orderId=o"])
def test_body_that_is_not_json_is_refused(shared_client: httpx.Client, content: bytes) -> None:
    response = shared_client.post(FIRST.collection, content=content, headers={"Idempotency-Key": "key-1"})
    assert_error(response, 400, "InvalidBody")
    assert ledger(shared_client)[FIRST.name] == {}


def test_fields_the_service_does_not_use_are_ignored(client: httpx.Client) -> None:
    body = {**LAST.body, "address": {"city": "Lyon"}, "priority": "express"}
    response = client.post(LAST.collection, json=body, headers={"Idempotency-Key": "key-1"})
    assert response.status_code == 201, response.text


def test_bad_requests_draw_no_fault(client: httpx.Client) -> None:
    """Validation comes first: with every call failing, a bad request still gets its 400."""
    set_faults(client, {FIRST.name: {"transientRate": 1}})

    assert_error(client.post(FIRST.collection, json=FIRST.body), 400, "InvalidIdempotencyKey")

    assert stats(client)[FIRST.name] == NO_CALLS


def test_body_too_large_is_refused(shared_client: httpx.Client) -> None:
    body = {**FIRST.body, "padding": "x" * (1024 * 1024)}
    response = shared_client.post(FIRST.collection, json=body, headers={"Idempotency-Key": "key-1"})
    assert_error(response, 413, "BodyTooLarge")
    assert ledger(shared_client)[FIRST.name] == {}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nowhere"),
        ("POST", f"/{FIRST.name}"),
        # An undo action is served only under its own resource's collection, and a resource that cannot
        # be undone has no undo route at all.
        *[("POST", path) for path in other_undo_paths()],
        *[("POST", f"{service.collection}/key-1/{undo}") for service in FINAL for undo in UNDO_ACTIONS],
    ],
)
def test_unknown_route_is_a_json_404(shared_client: httpx.Client, method: str, path: str) -> None:
    assert_error(shared_client.request(method, path), 404, "NotFound")


def test_wrong_method_is_a_json_405(shared_client: httpx.Client) -> None:
    response = shared_client.get(FIRST.collection)
    assert_error(response, 405, "MethodNotAllowed")
    assert response.headers["allow"] == "POST"


def test_health(shared_client: httpx.Client) -> None:
    response = shared_client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
