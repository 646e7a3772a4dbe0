"""Injected faults: what the caller gets and what the ledger records for each."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.simulators.conftest import ServedSimulators, SimulatorsFactory
from tests.simulators.helpers import (
    FAULT_DEFAULTS,
    FINAL,
    FINAL_IDS,
    FIRST,
    LAST,
    RESOURCE_IDS,
    RESOURCES,
    SECOND,
    SERVICE_IDS,
    UNDECLARED,
    UNDOABLE,
    UNDOABLE_IDS,
    Service,
    apply,
    assert_error,
    compensate,
    entry,
    ledger,
    needs_services,
    set_faults,
    stats,
    without_seq,
)
from tests.support import wait_for


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_transient_fault_answers_503_and_applies_nothing(client: httpx.Client, service: Service) -> None:
    set_faults(client, {service.name: {"transientRate": 1}})

    assert_error(apply(client, service, "key-1"), 503, "Unavailable")

    assert ledger(client)[service.name] == {}


def test_transient_fault_on_compensation_compensates_nothing(client: httpx.Client) -> None:
    apply(client, FIRST, "key-1")
    set_faults(client, {FIRST.name: {"transientRate": 1}})

    assert_error(compensate(client, FIRST, "key-1"), 503, "Unavailable")

    assert ledger(client)[FIRST.name]["key-1"]["compensated"] == 0


@pytest.mark.parametrize("service", UNDOABLE, ids=UNDOABLE_IDS)
def test_permanent_fault_rejects_with_a_reason_and_compensation_still_works(
    client: httpx.Client, service: Service
) -> None:
    assert apply(client, service, "before").status_code == 201
    set_faults(client, {service.name: {"permanentRate": 1}})

    message = assert_error(apply(client, service, "rejected"), 422, "Rejected")

    assert service.rejection in message
    assert "rejected" not in ledger(client)[service.name]
    # Compensations never fail permanently: the earlier effect is undone, the rejected one is not found.
    assert compensate(client, service, "before").json() == {"id": "before", "status": service.compensated}
    assert compensate(client, service, "rejected").json() == {"id": "rejected", "status": "not-found"}
    assert without_seq(ledger(client)[service.name]) == {"before": entry(service, "before", compensated=1)}


@pytest.mark.parametrize("service", FINAL, ids=FINAL_IDS)
def test_permanent_fault_rejects_an_effect_that_cannot_be_undone_too(
    client: httpx.Client, service: Service
) -> None:
    set_faults(client, {service.name: {"permanentRate": 1}})

    assert service.rejection in assert_error(apply(client, service, "rejected"), 422, "Rejected")

    assert ledger(client)[service.name] == {}


def test_permanent_fault_does_not_reject_the_replay_of_an_applied_key(client: httpx.Client) -> None:
    """The effect exists: a replay answers it, as a real service's idempotency layer would."""
    apply(client, SECOND, "key-1")
    set_faults(client, {SECOND.name: {"permanentRate": 1}})

    replay = apply(client, SECOND, "key-1")

    assert replay.status_code == 200
    assert replay.json()["status"] == SECOND.applied


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_lost_reply_applies_then_answers_503_and_a_retry_answers_200(
    client: httpx.Client, service: Service
) -> None:
    set_faults(client, {service.name: {"lostReplyRate": 1}})

    assert_error(apply(client, service, "key-1"), 503, "Unavailable")
    recorded = ledger(client)[service.name]["key-1"]
    assert (recorded["applied"], recorded["compensated"], recorded["result"]) == (
        1,
        0,
        service.result("key-1"),
    )

    set_faults(client, {service.name: {"lostReplyRate": 0}})
    retry = apply(client, service, "key-1")

    # The retry is told what the lost answer said: the values recorded with the effect.
    assert retry.status_code == 200
    assert retry.json() == service.answer("key-1")
    assert ledger(client)[service.name]["key-1"] == recorded


def test_lost_reply_on_compensation_compensates_then_answers_503(client: httpx.Client) -> None:
    apply(client, LAST, "key-1")
    set_faults(client, {LAST.name: {"lostReplyRate": 1}})

    assert_error(compensate(client, LAST, "key-1"), 503, "Unavailable")
    assert ledger(client)[LAST.name]["key-1"]["compensated"] == 1

    set_faults(client, {LAST.name: {}})
    assert compensate(client, LAST, "key-1").json() == {"id": "key-1", "status": LAST.compensated}
    assert ledger(client)[LAST.name]["key-1"]["compensated"] == 1


def test_hang_outlasts_the_client_timeout_and_applies_nothing(
    simulators: ServedSimulators, client: httpx.Client
) -> None:
    set_faults(client, {SECOND.name: {"hangRate": 1, "hangMs": 1500}})
    started = time.monotonic()

    with pytest.raises(httpx.TimeoutException):
        client.post(SECOND.collection, json=SECOND.body, headers={"Idempotency-Key": "key-1"}, timeout=0.5)

    assert stats(client)[SECOND.name]["hang"] == 1
    assert ledger(client)[SECOND.name] == {}
    # The server stops hanging as soon as the caller hangs up, well before hangMs.
    ended = f"{SECOND.name} apply key='key-1' fault=hang"
    wait_for(lambda: ended in simulators.log(), what="the hang to end")
    assert time.monotonic() - started < 1.5
    assert ledger(client)[SECOND.name] == {}


def test_hang_answers_503_after_hang_ms(client: httpx.Client) -> None:
    set_faults(client, {FIRST.name: {"hangRate": 1, "hangMs": 400}})
    started = time.monotonic()

    response = apply(client, FIRST, "key-1")

    assert time.monotonic() - started >= 0.4
    assert_error(response, 503, "Unavailable")
    assert ledger(client)[FIRST.name] == {}


def test_hang_on_compensation_compensates_nothing(client: httpx.Client) -> None:
    apply(client, FIRST, "key-1")
    set_faults(client, {FIRST.name: {"hangRate": 1, "hangMs": 200}})

    assert_error(compensate(client, FIRST, "key-1"), 503, "Unavailable")

    assert ledger(client)[FIRST.name]["key-1"]["compensated"] == 0


@pytest.mark.parametrize("operation", ["apply", "compensate"])
def test_latency_delays_the_answer(client: httpx.Client, operation: str) -> None:
    set_faults(client, {LAST.name: {"latencyMs": 300}})
    started = time.monotonic()

    response = (apply if operation == "apply" else compensate)(client, LAST, "key-1")

    assert time.monotonic() - started >= 0.3
    assert response.status_code in (200, 201)


@needs_services(2)
def test_latency_of_one_service_does_not_block_the_others(
    simulators: ServedSimulators, client: httpx.Client
) -> None:
    set_faults(client, {FIRST.name: {"latencyMs": 1500}})
    slow: list[httpx.Response] = []
    with simulators.client() as other:
        thread = threading.Thread(target=lambda: slow.append(apply(other, FIRST, "slow")))
        thread.start()
        wait_for(lambda: stats(client)[FIRST.name]["calls"] == 1, what="the slow call to arrive")
        started = time.monotonic()
        assert apply(client, LAST, "fast").status_code == 201
        assert time.monotonic() - started < 0.75
        thread.join(10)
    assert slow[0].status_code == 201


@needs_services(2)
def test_faults_replace_the_services_named_and_leave_the_others(client: httpx.Client) -> None:
    set_faults(client, {FIRST.name: {"transientRate": 0.25, "latencyMs": 10}, LAST.name: {"hangMs": 5}})

    profile = set_faults(client, {FIRST.name: {"permanentRate": 0.5}})

    assert profile == {
        **{name: FAULT_DEFAULTS for name in SERVICE_IDS},
        FIRST.name: {**FAULT_DEFAULTS, "permanentRate": 0.5},
        LAST.name: {**FAULT_DEFAULTS, "hangMs": 5},
    }
    assert client.get("/faults").json() == profile


def test_faults_start_empty(client: httpx.Client) -> None:
    assert client.get("/faults").json() == {name: FAULT_DEFAULTS for name in SERVICE_IDS}
    assert set_faults(client, {}) == {name: FAULT_DEFAULTS for name in SERVICE_IDS}


NAME = SECOND.name


@pytest.mark.parametrize(
    "body",
    [
        {NAME: {"transientRate": 1.5}},
        {NAME: {"transientRate": -0.1}},
        {NAME: {"transientRate": True}},
        {NAME: {"transientRate": "0.5"}},
        {NAME: {"latencyMs": -1}},
        {NAME: {"latencyMs": 1.5}},
        {NAME: {"hangMs": -5}},
        {NAME: {"transient_rate": 0.5}},
        {NAME: {"retryRate": 0.5}},
        {UNDECLARED: {"transientRate": 0.5}},
        {NAME: None},
        {NAME: {"transientRate": 0.5}, UNDECLARED: {}},
        [{NAME: {}}],
        NAME,
    ],
    ids=lambda body: str(body),
)
def test_invalid_faults_are_refused_and_change_nothing(shared_client: httpx.Client, body: Any) -> None:
    before = set_faults(shared_client, {LAST.name: {"latencyMs": 7, "lostReplyRate": 0.1}})

    assert_error(shared_client.post("/faults", json=body), 400, "InvalidFaults")

    assert shared_client.get("/faults").json() == before
    set_faults(shared_client, {LAST.name: {}})


@pytest.mark.parametrize("content", [b"", b"not json", b'{"' + NAME.encode() + b'": {"transientRate": 1}'])
def test_faults_body_that_is_not_json_is_refused(shared_client: httpx.Client, content: bytes) -> None:
    before = shared_client.get("/faults").json()

    response = shared_client.post("/faults", content=content, headers={"content-type": "application/json"})

    assert_error(response, 400, "InvalidFaults")
    assert shared_client.get("/faults").json() == before


def test_rates_in_between_inject_some_faults(client: httpx.Client) -> None:
    set_faults(client, {FIRST.name: {"transientRate": 0.5}})

    statuses = [apply(client, FIRST, f"key-{index}").status_code for index in range(40)]

    # 40 draws at 0.5: all alike has a probability of 2 in a trillion.
    assert statuses.count(503) > 0 and statuses.count(201) > 0
    assert len(ledger(client)[FIRST.name]) == statuses.count(201)
    assert stats(client)[FIRST.name]["transient"] == statuses.count(503)


def _statuses_with_seed(factory: SimulatorsFactory, data_dir: Path, seed: int) -> list[int]:
    running = factory(data_dir=data_dir, seed=seed)
    with running.client() as http:
        set_faults(http, {SECOND.name: {"transientRate": 0.3, "permanentRate": 0.3, "lostReplyRate": 0.2}})
        statuses = [apply(http, SECOND, f"key-{index}").status_code for index in range(30)]
    running.stop()
    return statuses


def test_a_seed_makes_the_faults_reproducible(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    first = _statuses_with_seed(simulators_factory, tmp_path / "one", seed=1234)
    second = _statuses_with_seed(simulators_factory, tmp_path / "two", seed=1234)

    assert first == second
    assert {201, 422, 503} <= set(first)


def test_shutdown_ends_a_hang_at_once(simulators_factory: SimulatorsFactory) -> None:
    simulators = simulators_factory()
    client = simulators.client()
    set_faults(client, {FIRST.name: {"hangRate": 1, "hangMs": 60000}})
    outcome: list[object] = []

    def call() -> None:
        with simulators.client(timeout=30) as http:
            try:
                outcome.append(apply(http, FIRST, "key-1").status_code)
            except httpx.TransportError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    wait_for(lambda: stats(client)[FIRST.name]["hang"] == 1, what="the call to hang")
    client.close()
    started = time.monotonic()

    assert simulators.stop() == 0

    assert time.monotonic() - started < 5
    thread.join(10)
    # The hanging call is answered 503 when the server stops, or its connection is closed.
    assert outcome and (outcome[0] == 503 or isinstance(outcome[0], httpx.TransportError))
