"""The trace each call came in: the ledger keeps the distinct trace ids of its calls' ``traceparent``
headers (applies, replays and undos alike), a few at most, and serves them as ``traceIds``."""

from __future__ import annotations

import httpx

from simulators.models import MAX_TRACE_IDS
from tests.simulators.helpers import FIRST, Service, entry, ledger, without_seq

# Distinct trace ids, more than an entry keeps.
TRACES = [f"{n:x}" * 32 for n in range(1, MAX_TRACE_IDS + 3)]


def traceparent(trace: str, span: str = "1" * 16) -> str:
    """A W3C ``traceparent`` header in trace ``trace``, from span ``span``."""
    return f"00-{trace}-{span}-01"


def apply_in(client: httpx.Client, service: Service, key: str, header: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key}
    if header is not None:
        headers["traceparent"] = header
    return client.post(service.collection, json=service.body, headers=headers)


def undo_in(client: httpx.Client, service: Service, key: str, header: str) -> httpx.Response:
    return client.post(service.compensation_path(key), headers={"traceparent": header})


def traces(client: httpx.Client, service: Service, key: str) -> list[str] | None:
    return ledger(client)[service.name][key]["traceIds"]


def test_calls_record_the_distinct_traces_they_came_in_a_few_at_most(client: httpx.Client) -> None:
    key = "o-1:step"
    assert apply_in(client, FIRST, key, traceparent(TRACES[0])).status_code == 201
    assert traces(client, FIRST, key) == TRACES[:1]
    # A duplicate in the same trace (an Agent's retry: another span) adds nothing; a replay in another does.
    assert apply_in(client, FIRST, key, traceparent(TRACES[0], "2" * 16)).status_code == 200
    assert traces(client, FIRST, key) == TRACES[:1]
    assert apply_in(client, FIRST, key, traceparent(TRACES[1])).status_code == 200
    assert traces(client, FIRST, key) == TRACES[:2]
    # The undo, and an undo again, too.
    assert undo_in(client, FIRST, key, traceparent(TRACES[2])).json()["status"] == FIRST.compensated
    assert undo_in(client, FIRST, key, traceparent(TRACES[3])).json()["status"] == FIRST.compensated
    assert traces(client, FIRST, key) == TRACES[:4]
    # Bounded: the first few distinct ones are kept, later ones are not.
    assert apply_in(client, FIRST, key, traceparent(TRACES[4])).status_code == 200
    assert undo_in(client, FIRST, key, traceparent(TRACES[5])).status_code == 200
    assert traces(client, FIRST, key) == TRACES[:MAX_TRACE_IDS]
    # Nothing else changed: the replays and the second undo only added their traces.
    expected = entry(FIRST, key, compensated=1, trace_ids=TRACES[:MAX_TRACE_IDS])
    assert without_seq(ledger(client)[FIRST.name]) == {key: expected}


def test_a_call_without_a_valid_traceparent_records_no_trace(client: httpx.Client) -> None:
    for n, header in enumerate([None, "garbage", traceparent("0" * 32), f"01-{TRACES[0]}-{'1' * 16}"]):
        key = f"o-{n}:step"
        assert apply_in(client, FIRST, key, header).status_code == 201
        assert traces(client, FIRST, key) == [], header
    # The engine's parser reads the header whatever the case of its hex digits.
    assert apply_in(client, FIRST, "o-9:step", traceparent("ab" * 16).upper()).status_code == 201
    assert traces(client, FIRST, "o-9:step") == ["ab" * 16]
