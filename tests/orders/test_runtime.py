"""The composition root: one runtime per event loop, shared by concurrent first calls, closed with it."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from orders.runtime import Runtime, runtime

SERVICE_BUS = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"


def test_one_runtime_per_loop_closed_when_the_loop_ends(
    azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("INVENTORY", "PAYMENT", "SHIPPING"):
        monkeypatch.setenv(f"{name}_SERVICE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("STATE_STORE_CONNECTION", azurite_connection_string)
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
