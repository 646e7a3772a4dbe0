"""The hosted simulators' own key check: service calls need SIMULATORS_KEY; without it they fail closed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from simulators.hosted import ROUTE_PREFIX, SIMULATORS_KEY_HEADER, hosted_app
from tests.simulators.helpers import FIRST


def call(
    tmp_path: Path,
    key: str | None,
    headers: dict[str, str],
    path: str = ROUTE_PREFIX + FIRST.collection,
    body: dict[str, object] = FIRST.body,
) -> int:
    environ = {"SIMULATORS_DATA_DIR": str(tmp_path)}
    if key is not None:
        environ["SIMULATORS_KEY"] = key

    async def run() -> int:
        transport = httpx.ASGITransport(app=hosted_app(environ))
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            response = await client.post(path, json=body, headers={"Idempotency-Key": "k-1", **headers})
            if response.status_code >= 400:
                assert response.json()["error"]["message"], "refusals carry the JSON error shape"
            return response.status_code

    return asyncio.run(run())


def test_a_service_call_needs_the_key(tmp_path: Path) -> None:
    assert call(tmp_path, "s3cret", {}) == 401
    assert call(tmp_path, "s3cret", {SIMULATORS_KEY_HEADER: "s3cret-not"}) == 401
    assert call(tmp_path, "s3cret", {SIMULATORS_KEY_HEADER: "s3cret"}) == 201


def test_without_a_configured_key_service_calls_are_refused(tmp_path: Path) -> None:
    assert call(tmp_path, None, {SIMULATORS_KEY_HEADER: ""}) == 503
    assert call(tmp_path, "", {}) == 503


def test_controls_are_left_to_the_host_master_key(tmp_path: Path) -> None:
    # The platform checks the master key on the control function; the simulators do not add a second key.
    assert call(tmp_path, "s3cret", {}, path=f"{ROUTE_PREFIX}/faults", body={}) == 200
