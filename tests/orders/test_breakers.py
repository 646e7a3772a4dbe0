"""GET /api/breakers: one entry per agent, in workflow order, closed with nulls when nothing is stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.breaker import BreakerRecord, MemoryBreakerStore, opened, probe_claimed
from orders.breakers import BreakerList, BreakersApi

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


async def test_every_agent_in_workflow_order_with_nulls_where_nothing_is_stored() -> None:
    store = MemoryBreakerStore()
    record = opened(BreakerRecord("beta"), NOW, 5, 5, 10)
    assert record is not None
    await store.save(record)
    tripped = opened(BreakerRecord("gamma"), NOW, 6, 5, 10)
    assert tripped is not None
    probing = probe_claimed(tripped, NOW.replace(second=30), "i-1", 4)  # half-open: a trial call runs
    assert probing is not None
    await store.save(probing)
    await store.save(BreakerRecord("retired-service"))  # not an agent of the workflow: not listed

    async def get_store() -> MemoryBreakerStore:
        return store

    reply = await BreakersApi(["alpha", "beta", "gamma"], get_store).list()
    assert reply.status == 200
    assert reply.body == {
        "breakers": [
            {
                "service": "alpha",
                "state": "closed",
                "consecutiveFailures": 0,
                "openedAt": None,
                "openUntil": None,
                "probeBy": None,
                "updatedAt": None,
            },
            {
                "service": "beta",
                "state": "open",
                "consecutiveFailures": 5,
                "openedAt": "2026-05-01T12:00:00Z",
                "openUntil": "2026-05-01T12:00:10Z",
                "probeBy": None,
                "updatedAt": "2026-05-01T12:00:00Z",
            },
            {
                "service": "gamma",
                "state": "half-open",
                "consecutiveFailures": 6,
                "openedAt": "2026-05-01T12:00:00Z",
                "openUntil": "2026-05-01T12:00:10Z",
                "probeBy": "2026-05-01T12:00:34Z",
                "updatedAt": "2026-05-01T12:00:30Z",
            },
        ]
    }
    BreakerList.model_validate(reply.body)
