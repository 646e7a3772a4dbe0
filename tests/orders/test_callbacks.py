"""The callback route's refusals (orders.callbacks): its body goes through the API's one parser, and no
header or context it is sent makes a fault. Each refusal changes nothing and sends nothing."""

from __future__ import annotations

import json

import pytest

from engine.clock import ManualClock
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.tasks import TaskService
from orders.api import MAX_BODY_BYTES
from orders.callbacks import Callbacks, Refused, signature, signed_headers
from orders.catalog import CATALOG, SERVICES
from tests.engine.fakes import MemoryStore, RecordingSender

pytestmark = pytest.mark.anyio

SECRET = "the-callback-secret"
SERVICE = next(s for s in SERVICES if s.callback_secret_setting)
NOW = 1_800_000_000.0


class Route:
    def __init__(self) -> None:
        self.sender = RecordingSender()
        parts = EngineParts(CATALOG, MemoryStore(), self.sender, ManualClock(), EngineSettings())
        tasks = TaskService(parts)

        async def resolve() -> TaskService:
            return tasks

        self.callbacks = Callbacks(SERVICES, {SERVICE.name: SECRET}, resolve, clock=lambda: NOW)

    async def post(self, body: bytes, **changed: str) -> Refused:
        """``body`` signed as its service signs it, with the headers given in ``changed`` instead."""
        headers = {name.lower(): value for name, value in signed_headers(SECRET, body, NOW).items()}
        answer = await self.callbacks.receive(SERVICE.name, {**headers, **changed}, body)
        assert isinstance(answer, Refused), answer
        assert self.sender.sent == []
        return answer


def callback(context: str = "o-1:0:f:1", **fields: object) -> dict[str, object]:
    return {"context": context, "outcome": "done", **fields}


@pytest.fixture
def route() -> Route:
    return Route()


def code(refused: Refused) -> tuple[int, str]:
    return refused.status, refused.code


async def test_a_well_formed_callback_reaches_its_order(route: Route) -> None:
    assert code(await route.post(json.dumps(callback()).encode())) == (404, "NotFound")  # no order o-1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"context": "o-1:0:f:1", "outcome": "refused", "outcome": "done"}', (400, "InvalidJson")),
        (b'{"context": "o-1:0:f:1", "outcome": "done", "result": {"x": NaN}}', (400, "InvalidJson")),
        (b'{"context": "o-1:0:f:1", "outcome": "done", "result": {"x": 1e400}}', (400, "InvalidJson")),
        (b'["o-1:0:f:1"]', (400, "ValidationFailed")),
        (b'{"context": "o-1:0:f:1", "outcome": "maybe"}', (400, "ValidationFailed")),
    ],
    ids=["a repeated key", "NaN", "too large a number", "no object", "not a callback"],
)
async def test_the_body_goes_through_the_api_s_one_parser(
    route: Route, body: bytes, expected: tuple[int, str]
) -> None:
    assert code(await route.post(body)) == expected


async def test_a_body_past_the_limit_is_413_and_one_not_json_415(route: Route) -> None:
    big = json.dumps(callback(result={"pad": "x" * (900 * 1024)})).encode()
    assert len(big) > MAX_BODY_BYTES
    assert code(await route.post(big)) == (413, "PayloadTooLarge")
    text = json.dumps(callback()).encode()
    assert code(await route.post(text, **{"content-type": "text/plain"})) == (415, "UnsupportedMediaType")
    assert code(await route.post(text, **{"content-type": ""})) == (415, "UnsupportedMediaType")


@pytest.mark.parametrize("timestamp", ["²", "1٨", "+1800000000", " 1800000000", "9" * 5000, ""])
async def test_a_timestamp_that_is_no_number_of_seconds_is_401(route: Route, timestamp: str) -> None:
    body = json.dumps(callback()).encode()
    refused = await route.post(
        body, **{"callback-timestamp": timestamp, "callback-signature": signature(SECRET, timestamp, body)}
    )
    assert code(refused) == (401, "Unauthorized")


@pytest.mark.parametrize(
    "context",
    ["a/b:2:f:1", "o-1:²:f:1", "o-1:0:f:²", "o-1:0:x:1", "web.o-1\n:0:f:1", "o 1:0:f:1", "o-1:0:f:0"],
)
async def test_a_signed_context_this_app_never_sends_is_400(route: Route, context: str) -> None:
    refused = await route.post(json.dumps(callback(context)).encode())
    assert code(refused) == (400, "ValidationFailed") and "context" in refused.message
