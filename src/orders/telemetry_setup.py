"""Telemetry at start-up: Azure Monitor (OpenTelemetry) when Application Insights is configured."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("orders.telemetry")


def configure_telemetry() -> bool:
    """Send logs, traces and the engine's events to Application Insights if its connection string is set.

    Returns True if it did. Without the setting (local runs, tests) nothing is configured.
    """
    # httpx logs every request at INFO: one trace per remote-service call through the host, repeating
    # what the Agent's own record says of it.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING"):
        return False
    from azure.monitor.opentelemetry import configure_azure_monitor  # heavy import: only when used

    # The engine's events are INFO records; the host's root logger may be set higher.
    logging.getLogger("engine").setLevel(logging.INFO)
    configure_azure_monitor(logger_name="engine")
    log.info("Azure Monitor telemetry configured")
    return True
