"""The composition root: one runtime per event loop, shared by concurrent first calls, closed with it."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from orders.catalog import CATALOG
from orders.runtime import Runtime, catalog, runtime
from orders.settings import load_settings
from tests.support import INPUT_KEY, service_urls

SERVICE_BUS = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"


def test_one_runtime_per_loop_closed_when_the_loop_ends(
    azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, url in service_urls("http://127.0.0.1:1").items():
        monkeypatch.setenv(name, url)
    monkeypatch.setenv("STATE_STORE_CONNECTION", azurite_connection_string)
    monkeypatch.setenv("INPUT_ENCRYPTION_KEY", INPUT_KEY["INPUT_ENCRYPTION_KEY"])
    monkeypatch.setenv("ServiceBusConnection", SERVICE_BUS)  # connects on first send only

    async def use() -> list[Runtime]:
        built = await asyncio.gather(*(runtime() for _ in range(5)))
        assert await built[0].tasks.parts.store.load("no-such-order") is None  # opens a table session
        return built

    first = asyncio.run(use())
    assert all(r is first[0] for r in first)  # concurrent first calls share one build
    second = asyncio.run(use())
    assert second[0] is not first[0]  # another loop, its own clients
    caplog.set_level(logging.ERROR, logger="asyncio")
    gc.collect()
    # Every client was closed as its loop ended: no session or connector is left to the collector.
    assert first[0].closers == [] and second[0].closers == []
    assert "Unclosed" not in caplog.text


def test_breaker_reset_seconds_overrides_every_steps_policy_only_when_set() -> None:
    base = {
        **service_urls("http://127.0.0.1:1"),
        "STATE_STORE_CONNECTION": "UseDevelopmentStorage=true",
        **INPUT_KEY,
    }
    assert catalog(load_settings({**base, "BREAKER_RESET_SECONDS": ""})) is CATALOG
    shortened = catalog(load_settings({**base, "BREAKER_RESET_SECONDS": "1.5"}))
    steps = [s for w in CATALOG.workflows for s in w.steps]
    changed = [s for w in shortened.workflows for s in w.steps]
    assert [s.retry.breaker_reset_seconds for s in changed] == [1.5] * len(steps)
    assert [s.retry.max_tries for s in changed] == [s.retry.max_tries for s in steps]
    with pytest.raises(RuntimeError, match="BREAKER_RESET_SECONDS"):
        load_settings({**base, "BREAKER_RESET_SECONDS": "0"})
