"""The remote-service clients against a real local HTTP server: what they send, how answers are classified.

A service of its own (``alpha``) rather than the example services: the client is built from any
declaration; the example services' bodies are checked in ``tests/examples/test_simulated_services.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine.errors import Accepted, PermanentError, TransientError
from engine.messages import AgentRequest, callback_context
from orders.catalog import SERVICES
from orders.services.client import (
    CALLBACK_CONTEXT_HEADER,
    CALLBACK_URL_HEADER,
    SIMULATORS_KEY_HEADER,
    RemoteServices,
)
from orders.services.declaration import (
    AmountBody,
    Document,
    ItemsBody,
    Resource,
    ServiceDefinition,
    ServiceResult,
)
from servicebus_emulator.launcher import free_port

pytestmark = pytest.mark.anyio


class Debit(ServiceResult):
    debit_id: str


ALPHA = ServiceDefinition(
    name="alpha",
    description="a service of the tests",
    resources=(
        Resource(
            collection="debits",
            apply="debit",
            undo="credit",
            body=AmountBody,
            result=Debit,
            applied="debited",
            undone="credited",
            rejection="no funds",
        ),
        Resource(
            collection="holds",
            apply="hold",
            undo="free",
            body=ItemsBody,
            applied="held",
            undone="freed",
            rejection="none left",
        ),
    ),
)
BETA = ALPHA.model_copy(update={"name": "beta"})
NAME = ALPHA.name
ORDER = {"orderId": "o-1", "items": [{"sku": "a", "quantity": 2, "unitPrice": 2.5}], "currency": "EUR"}


class Service:
    """A scripted HTTP service: answers the next scripted (status, body, delay, headers) and records
    requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, bytes, float, dict[str, str]]] = []
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                service.seen.append((self.path, dict(self.headers), body))
                scripted = service.script.pop(0) if service.script else (200, b"{}", 0.0, {})
                status, answer, delay, extra = scripted
                time.sleep(delay)  # a slow service, not synchronisation
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                # The client may have given up first (a timeout): nobody reads the answer then.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def answer(
        self, status: int, body: Any = None, delay: float = 0.0, headers: dict[str, str] | None = None
    ) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body if body is not None else {}).encode()
        self.script.append((status, raw, delay, headers or {}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def service() -> Iterator[Service]:
    running = Service()
    yield running
    running.close()


@pytest.fixture
async def services(service: Service) -> AsyncIterator[RemoteServices]:
    remote = RemoteServices((ALPHA, BETA), {NAME: service.url, BETA.name: service.url + "/"})
    yield remote
    await remote.client.aclose()


def request(action: str, step: str = "debit-step") -> AgentRequest:
    return AgentRequest(
        order_id="o-1",
        step=step,
        step_index=1,
        attempt=1,
        action=action,
        idempotency_key=f"o-1:{step}",
        complete_by=datetime.now(UTC) + timedelta(seconds=30),
        payload={"input": ORDER, "results": {}},
    )


async def test_every_action_the_workflows_name_exists() -> None:
    from orders.catalog import CATALOG

    remote = RemoteServices(SERVICES, {})
    actions = remote.actions()
    await remote.client.aclose()
    for workflow in CATALOG.workflows:
        for step in workflow.steps:
            if not step.calls:
                continue  # a wait calls nothing
            assert step.action in actions[step.call_agent]
            assert step.compensation is None or step.compensation in actions[step.call_agent]


async def test_an_apply_sends_its_body_model_and_the_idempotency_key(
    service: Service, services: RemoteServices
) -> None:
    service.answer(201, {"id": "o-1:debit-step", "status": "debited", "debitId": "d-1"})
    result = await services.actions()[NAME]["debit"](request("debit"), 5.0)
    assert result == {"debitId": "d-1"}, "only the declared result values are passed on"
    ((path, headers, body),) = service.seen
    assert path == "/alpha/debits" and headers["Idempotency-Key"] == "o-1:debit-step"
    assert body == {"orderId": "o-1", "amount": 5.0, "currency": "EUR"}


async def test_each_resource_sends_its_own_body_to_its_own_collection(
    service: Service, services: RemoteServices
) -> None:
    await services.actions()[BETA.name]["hold"](request("hold", step="hold-step"), 5.0)
    ((path, _, body),) = service.seen
    assert path == "/beta/holds", "a base URL's trailing slash is not doubled"
    assert body == {"orderId": "o-1", "items": [{"sku": "a", "quantity": 2}]}


async def test_a_request_that_cannot_be_encoded_is_a_lasting_fault_and_is_not_sent(
    service: Service, services: RemoteServices
) -> None:
    # A total past the largest float: the request is at fault, not the service (its breaker is not charged).
    huge = {**ORDER, "items": [{"sku": "a", "quantity": 10, "unitPrice": 1.7e308}]}
    with pytest.raises(PermanentError, match="cannot be encoded"):
        await services.actions()[NAME]["debit"](
            request("debit").model_copy(update={"payload": {"input": huge, "results": {}}}), 5.0
        )
    assert service.seen == []


async def test_an_undo_addresses_the_first_call_by_its_key_and_names_what_it_returned(
    service: Service, services: RemoteServices
) -> None:
    undo = request("credit", step="debit-step")
    await services.actions()[NAME]["credit"](undo, 5.0)
    known = undo.model_copy(update={"payload": {"input": ORDER, "results": {"debitId": "d-1", "x": 1}}})
    await services.actions()[NAME]["credit"](known, 5.0)
    (path, _, lost), (_, _, answered) = service.seen
    assert path == "/alpha/debits/o-1%3Adebit-step/credit"
    assert lost == {"orderId": "o-1"}, "a lost answer leaves only the key"
    assert answered == {"orderId": "o-1", "debitId": "d-1"}, "its own result values, nothing else"


async def test_an_answer_without_its_declared_result_is_a_lasting_fault(
    service: Service, services: RemoteServices
) -> None:
    service.answer(201, {"id": "o-1:debit-step", "status": "debited"})
    with pytest.raises(PermanentError, match="lacks its declared result"):
        await services.actions()[NAME]["debit"](request("debit"), 5.0)


async def test_a_body_is_built_from_the_input_and_the_results_before() -> None:
    class Receipt(ItemsBody):
        needs = ("debitId",)
        debit_id: str

        @classmethod
        def build(cls, document: Document) -> Receipt:
            items = ItemsBody.build(document).wire()["items"]
            return cls.model_validate(
                {"orderId": document.order_id, "items": items, "debitId": document.result("debitId")}
            )

    seen = Service()
    gamma = ServiceDefinition(
        name="gamma",
        description="receipts",
        resources=(Resource(collection="receipts", apply="print", body=Receipt, applied="p", rejection="r"),),
    )
    remote = RemoteServices((gamma,), {"gamma": seen.url})
    try:
        sent = request("print").model_copy(
            update={"payload": {"input": ORDER, "results": {"debitId": "d-9"}}}
        )
        await remote.actions()["gamma"]["print"](sent, 5.0)
        with pytest.raises(PermanentError, match="cannot be encoded"):
            await remote.actions()["gamma"]["print"](request("print"), 5.0)  # no debitId: never sent
    finally:
        await remote.client.aclose()
        seen.close()
    assert [body for _, _, body in seen.seen] == [
        {"orderId": "o-1", "items": [{"sku": "a", "quantity": 2}], "debitId": "d-9"}
    ]
    assert "print" in remote.actions()["gamma"] and len(remote.actions()["gamma"]) == 1, "no undo action"


@pytest.mark.parametrize("status", [408, 429, 500, 503])
async def test_timeouts_throttling_and_server_errors_are_transient(
    service: Service, services: RemoteServices, status: int
) -> None:
    service.answer(status, {"error": {"message": "later"}})
    with pytest.raises(TransientError, match=f"HTTP {status}"):
        await services.actions()[NAME]["debit"](request("debit"), 5.0)


@pytest.mark.parametrize("status", [400, 402, 404, 409, 422])
async def test_other_client_errors_are_lasting_and_carry_the_services_reason(
    service: Service, services: RemoteServices, status: int
) -> None:
    service.answer(status, {"error": {"code": "Declined", "message": "no funds"}})
    with pytest.raises(PermanentError, match="alpha: no funds"):
        await services.actions()[NAME]["debit"](request("debit"), 5.0)


async def test_a_lasting_error_without_a_json_reason_names_the_status(
    service: Service, services: RemoteServices
) -> None:
    service.answer(400, b"nope")
    with pytest.raises(PermanentError, match="HTTP 400"):
        await services.actions()[NAME]["debit"](request("debit"), 5.0)


async def test_an_answer_that_is_not_json_is_transient(service: Service, services: RemoteServices) -> None:
    service.answer(200, b"<html>")
    with pytest.raises(TransientError, match="not JSON"):
        await services.actions()[NAME]["debit"](request("debit"), 5.0)


async def test_a_slow_answer_is_a_transient_timeout(service: Service, services: RemoteServices) -> None:
    service.answer(200, {}, delay=0.6)
    with pytest.raises(TransientError, match=r"^alpha: timed out after 0\.20s$"):
        await services.actions()[NAME]["debit"](request("debit"), 0.2)


async def test_a_service_that_is_down_is_transient() -> None:
    down = RemoteServices((ALPHA,), {NAME: f"http://127.0.0.1:{free_port()}"})
    try:
        with pytest.raises(TransientError, match="alpha: ClientConnectorError: "):
            await down.actions()[NAME]["debit"](request("debit"), 2.0)
    finally:
        await down.client.aclose()


async def test_a_service_that_answers_later_is_sent_where_to_and_what_with_and_its_key(
    service: Service,
) -> None:
    later = ALPHA.model_copy(
        update={"resources": tuple(r.model_copy(update={"asynchronous": True}) for r in ALPHA.resources)}
    )
    remote = RemoteServices(
        (later,), {NAME: service.url}, keys={NAME: "s3cret"}, callback_base="https://app.example/"
    )
    try:
        service.answer(202, {"status": "accepted"})
        with pytest.raises(Accepted):
            await remote.actions()[NAME]["debit"](request("debit"), 5.0)
    finally:
        await remote.client.aclose()
    ((_, headers, body),) = service.seen
    assert headers["Idempotency-Key"] == "o-1:debit-step"
    assert headers[CALLBACK_URL_HEADER] == "https://app.example/api/callbacks/alpha"
    assert headers[CALLBACK_CONTEXT_HEADER] == callback_context(request("debit"))
    assert headers[SIMULATORS_KEY_HEADER] == "s3cret"
    assert headers["Content-Type"] == "application/json"
    assert body == {"orderId": "o-1", "amount": 5.0, "currency": "EUR"}


async def test_a_service_that_answers_now_is_sent_no_callback_and_no_key_it_was_not_given(
    service: Service, services: RemoteServices
) -> None:
    service.answer(202, {"id": "o-1:debit-step", "status": "debited", "debitId": "d-1"})
    assert await services.actions()[NAME]["debit"](request("debit"), 5.0) == {"debitId": "d-1"}
    ((_, headers, _),) = service.seen
    assert not {CALLBACK_URL_HEADER, CALLBACK_CONTEXT_HEADER, SIMULATORS_KEY_HEADER} & set(headers)


async def test_a_redirect_is_not_followed(service: Service, services: RemoteServices) -> None:
    service.answer(307, {}, headers={"Location": f"{service.url}/elsewhere"})
    assert await services.actions()[NAME]["hold"](request("hold", step="hold-step"), 5.0) == {}
    assert [path for path, _, _ in service.seen] == ["/alpha/holds"]


def test_the_session_is_made_on_the_first_call_in_its_loop_reused_and_closed(service: Service) -> None:
    """The services are built before any loop runs a call (the session must be made in a running loop);
    every call shares the one session, and ``client.aclose`` (the runtime's closer) closes it."""
    remote = RemoteServices((ALPHA,), {NAME: service.url})

    async def main() -> None:
        debit = remote.actions()[NAME]["debit"]
        service.answer(201, {"debitId": "d-1"})
        service.answer(201, {"debitId": "d-2"})
        await debit(request("debit"), 5.0)
        session = remote.client.get()
        await debit(request("debit"), 5.0)
        assert remote.client.get() is session and not session.closed
        await remote.client.aclose()
        assert session.closed

    asyncio.run(main())
    assert len(service.seen) == 2
