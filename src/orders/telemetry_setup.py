"""Telemetry at start-up: traces, metrics and the engine's events, to Application Insights in Azure or to
local files under the devhost.

- ``APPLICATIONINSIGHTS_CONNECTION_STRING`` set (Azure): Azure Monitor's OpenTelemetry distribution.
- ``ORDERS_TELEMETRY_DIR`` set (the devhost sets it): the spans and metrics as OTLP/JSON lines in
  ``spans.jsonl`` and ``metrics.jsonl`` there (read by ``orders-trace`` and the demo).
- Neither (tests, the simulation): nothing; every span and instrument is a no-op.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from engine import metrics

log = logging.getLogger("orders.telemetry")

TELEMETRY_DIR = "ORDERS_TELEMETRY_DIR"
# How often a process writes its metrics locally (ms); Azure Monitor's own default is 60 s.
_LOCAL_METRIC_INTERVAL_MS = 5_000
# Spans are written in batches, at most this long after they end (ms): soon enough for orders-trace.
_LOCAL_SPAN_DELAY_MS = 1_000


def configure_telemetry(service_name: str = "orders") -> str | None:
    """Configure where telemetry goes; returns "azure", "files" or None (nothing configured)."""
    # httpx logs every request at INFO: one trace per callback the hosted simulators send through the host
    # (the Agents' own calls go through aiohttp, which logs none).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING"):
        from azure.monitor.opentelemetry import configure_azure_monitor  # heavy import: only when used

        # The engine's events are INFO records; the host's root logger may be set higher.
        logging.getLogger("engine").setLevel(logging.INFO)
        # The Agents make their own client span per try (orders.services.client) and call through aiohttp,
        # which this distribution (1.8.11) has no instrumentation for, so each call is traced once.
        # httpx's instrumentation stays off, as before: only the hosted simulators' callbacks (demo only)
        # use httpx now.
        configure_azure_monitor(logger_name="engine", instrumentation_options={"httpx": {"enabled": False}})
        metrics.enable()
        log.info("Azure Monitor telemetry configured")
        return "azure"
    folder = os.environ.get(TELEMETRY_DIR)
    if folder:
        _configure_files(Path(folder), service_name)
        metrics.enable()
        return "files"
    return None


def _configure_files(folder: Path, service_name: str) -> None:
    """Spans and metrics of this process appended to files in ``folder`` (several processes share them)."""
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from adapters.otlp_file import METRICS_FILE, SPANS_FILE, JsonLinesMetricExporter, JsonLinesSpanExporter

    resource = Resource.create(
        # A restarted process may get a dead one's pid: the random part keeps their totals apart.
        {
            "service.name": service_name,
            "service.instance.id": f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
        }
    )
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            JsonLinesSpanExporter(folder / SPANS_FILE), schedule_delay_millis=_LOCAL_SPAN_DELAY_MS
        )
    )
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(
        JsonLinesMetricExporter(folder / METRICS_FILE), export_interval_millis=_LOCAL_METRIC_INTERVAL_MS
    )
    otel_metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    log.info("telemetry written to %s", folder)
