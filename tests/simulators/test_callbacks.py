"""The simulators' asynchronous mode: a resource declared asynchronous answers 202 and calls back, signed,
to a real HTTP server standing in for the app; its callbacks are lost, sent twice or late as told."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from orders.callbacks import verify
from orders.catalog import SERVICES
from orders.services.client import CALLBACK_CONTEXT_HEADER, CALLBACK_URL_HEADER, apply_path, undo_path
from tests.simulators.conftest import ServedSimulators, serve_simulators
from tests.support import wait_for

SECRET = "simulated-provider-secret"
PAYMENT = next(s for s in SERVICES if s.callback_secret_setting)
CHARGES = next(r for r in PAYMENT.resources if r.asynchronous)
BODY = {"orderId": "o-1", "amount": 12.5, "currency": "EUR"}


class Receiver:
    """An HTTP server on a free local port that keeps every callback posted to it and answers 202."""

    def __init__(self) -> None:
        received: list[tuple[dict[str, str], bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(202)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/callbacks/{PAYMENT.name}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture
def provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServedSimulators]:
    """Simulators that hold the payment's callback secret (the app reads it from its environment)."""
    assert PAYMENT.callback_secret_setting is not None
    monkeypatch.setenv(PAYMENT.callback_secret_setting, SECRET)
    served = serve_simulators(tmp_path / "data", tmp_path / "simulators.log")
    yield served
    served.stop()


def charge(
    provider: ServedSimulators,
    key: str,
    callback_url: str | None,
    context: str,
    traceparent: str | None = None,
) -> httpx.Response:
    headers = {"Idempotency-Key": key}
    if traceparent:
        headers["traceparent"] = traceparent
    if callback_url:
        headers |= {CALLBACK_URL_HEADER: callback_url, CALLBACK_CONTEXT_HEADER: context}
    with provider.client() as client:
        return client.post(apply_path(PAYMENT, CHARGES), json=BODY, headers=headers)


def faults(provider: ServedSimulators, **settings: Any) -> None:
    with provider.client() as client:
        assert client.post("/faults", json={PAYMENT.name: settings}).status_code == 200


def stats(provider: ServedSimulators) -> dict[str, int]:
    with provider.client() as client:
        return dict(client.get("/stats").json()[PAYMENT.name])


def ledger(provider: ServedSimulators) -> dict[str, Any]:
    with provider.client() as client:
        return dict(client.get("/ledger").json()[PAYMENT.name])


def test_an_apply_answered_later_is_applied_then_called_back_signed_and_twice_when_told(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    faults(provider, asyncRate=1, callbackDelayMs=50, callbackDuplicateRate=1)
    answered = charge(provider, "o-1:charge-payment", receiver.url, "o-1:1:f:1")
    assert answered.status_code == 202 and answered.json()["status"] == "accepted"
    wait_for(lambda: len(receiver.received) == 2, timeout=10, what="two callbacks")
    entry = ledger(provider)["o-1:charge-payment"]
    assert entry["applied"] == 1
    for headers, body in receiver.received:
        assert verify(headers, body, SECRET, time.time()) is None, "signed with the service's secret"
        assert json.loads(body) == {"context": "o-1:1:f:1", "outcome": "done", "result": entry["result"]}
    assert {k: stats(provider)[k] for k in ("accepted", "callbacks", "callbackDuplicated")} == {
        "accepted": 1,
        "callbacks": 2,
        "callbackDuplicated": 1,
    }


def test_a_callback_is_sent_in_the_trace_the_apply_came_in(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    """The app's handling of the callback joins the caller's trace; the effect records it as an apply's."""
    faults(provider, asyncRate=1, callbackDelayMs=0)
    sent = f"00-{'c' * 32}-{'d' * 16}-01"
    assert charge(provider, "o-7:charge-payment", receiver.url, "o-7:1:f:1", sent).status_code == 202
    assert charge(provider, "o-8:charge-payment", receiver.url, "o-8:1:f:1").status_code == 202
    wait_for(lambda: len(receiver.received) == 2, timeout=10, what="two callbacks")
    by_context = {json.loads(body)["context"]: headers for headers, body in receiver.received}
    assert by_context["o-7:1:f:1"]["traceparent"] == sent
    assert "traceparent" not in by_context["o-8:1:f:1"], "a call in no trace is called back in none"
    assert ledger(provider)["o-7:charge-payment"]["traceIds"] == ["c" * 32]
    assert ledger(provider)["o-8:charge-payment"]["traceIds"] == []


def test_a_refused_apply_is_called_back_refused_and_nothing_is_applied(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    faults(provider, asyncRate=1, callbackDelayMs=0, permanentRate=1)
    assert charge(provider, "o-2:charge-payment", receiver.url, "o-2:1:f:1").status_code == 202
    wait_for(lambda: receiver.received, timeout=10, what="the callback")
    [(_, body)] = receiver.received
    assert json.loads(body) == {"context": "o-2:1:f:1", "outcome": "refused", "reason": CHARGES.rejection}
    assert "o-2:charge-payment" not in ledger(provider)


def test_a_lost_callback_is_never_sent_and_a_late_one_comes_later(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    faults(provider, asyncRate=1, callbackDelayMs=0, callbackLostRate=1)
    assert charge(provider, "o-3:charge-payment", receiver.url, "o-3:1:f:1").status_code == 202
    # Counted once its fate is decided: the effect recorded, the callback dropped.
    wait_for(lambda: stats(provider)["callbackLost"] == 1, timeout=10, what="the callback to be lost")
    assert ledger(provider)["o-3:charge-payment"]["applied"] == 1
    faults(provider, asyncRate=1, callbackDelayMs=0, callbackLateRate=1, callbackLateMs=300)
    sent = time.monotonic()
    assert charge(provider, "o-4:charge-payment", receiver.url, "o-4:1:f:1").status_code == 202
    wait_for(lambda: receiver.received, timeout=10, what="the late callback")
    assert time.monotonic() - sent >= 0.3 and stats(provider)["callbackLate"] == 1
    assert [json.loads(body)["context"] for _, body in receiver.received] == ["o-4:1:f:1"]


def test_without_a_callback_url_or_an_async_rate_the_answer_comes_at_once(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    assert charge(provider, "o-5:charge-payment", receiver.url, "o-5:1:f:1").status_code == 201
    faults(provider, asyncRate=1)
    assert charge(provider, "o-6:charge-payment", None, "").status_code == 201
    assert stats(provider)["accepted"] == 0 and not receiver.received


def refund(provider: ServedSimulators, key: str) -> httpx.Response:
    with provider.client() as client:
        return client.post(undo_path(PAYMENT, CHARGES, key), json={"orderId": BODY["orderId"]})


def test_a_call_with_the_key_while_the_service_decides_is_taken_again_and_called_back_alike(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    """The Supervisor's re-dispatch of a charge still being decided is answered 202 and called back with
    the one decision: never a rejection of its own (which undid the order while the first call's decision
    went on to take the payment)."""
    faults(provider, asyncRate=1, callbackDelayMs=700)
    assert charge(provider, "o-9:charge-payment", receiver.url, "o-9:1:f:1").status_code == 202
    faults(provider, asyncRate=1, callbackDelayMs=0, permanentRate=1)
    assert charge(provider, "o-9:charge-payment", receiver.url, "o-9:2:f:2").status_code == 202
    wait_for(lambda: len(receiver.received) == 2, timeout=10, what="a callback for each dispatch")
    entry = ledger(provider)["o-9:charge-payment"]
    assert entry["applied"] == 1
    assert sorted(json.loads(body)["context"] for _, body in receiver.received) == ["o-9:1:f:1", "o-9:2:f:2"]
    for _, body in receiver.received:
        assert json.loads(body)["outcome"] == "done" and json.loads(body)["result"] == entry["result"]


def test_an_undo_while_the_service_decides_withdraws_the_apply_for_good(
    provider: ServedSimulators, receiver: Receiver
) -> None:
    """A refund that overtakes a charge still being decided (a decision slower than the step's CompleteBy)
    voids it: the charge is never taken, its dispatch is told so, and the key is refused from then on."""
    faults(provider, asyncRate=1, callbackDelayMs=700)
    assert charge(provider, "o-10:charge-payment", receiver.url, "o-10:1:f:1").status_code == 202
    undone = refund(provider, "o-10:charge-payment")
    assert undone.status_code == 200 and undone.json()["status"] == "not-found"
    wait_for(lambda: receiver.received, timeout=10, what="the callback")
    [(_, body)] = receiver.received
    assert json.loads(body) == {
        "context": "o-10:1:f:1",
        "outcome": "refused",
        "reason": "withdrawn by its undo",
    }
    assert "o-10:charge-payment" not in ledger(provider), "never applied"
    faults(provider, asyncRate=0)
    again = charge(provider, "o-10:charge-payment", None, "")
    assert again.status_code == 422 and "o-10:charge-payment" not in ledger(provider)
