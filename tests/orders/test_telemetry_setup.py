"""Telemetry at start-up: what is configured with and without Application Insights."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from orders.telemetry_setup import configure_telemetry


@pytest.fixture
def httpx_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("httpx")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)


def test_without_application_insights_nothing_is_exported_and_httpx_is_quiet(
    monkeypatch: pytest.MonkeyPatch, httpx_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("APPLICATIONINSIGHTS_CONNECTION_STRING", raising=False)
    monkeypatch.delenv("ORDERS_TELEMETRY_DIR", raising=False)
    caplog.set_level(logging.INFO)  # the root logger at INFO, as the Functions host sets it
    assert configure_telemetry() is None
    # A record per remote-service call would reach the host's traces at INFO.
    assert not httpx_logger.isEnabledFor(logging.INFO)
    assert httpx_logger.isEnabledFor(logging.WARNING)
