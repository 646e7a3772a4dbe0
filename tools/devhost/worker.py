"""One worker process: import the app, serve its HTTP, Service Bus and timer triggers until SIGTERM/SIGINT.

    python -m devhost.worker --app-dir DIR --worker-id N [--http-port P] [--log-level INFO]
        [--function-key K] [--master-key M] [--stats-file F]

All settings come from the environment (the caller sets them, as the Functions host sets app settings).
This process is the host for one app (HTTP, Service Bus receivers and settlement, timers, keys,
host.json) and hands indexing, function load and every invocation to ``azure-functions-runtime``, the
language worker's code Azure runs on Python 3.13 (:mod:`devhost.language_worker`). The runtime decides
concurrency as it does in Azure: synchronous functions in its pool of ``PYTHON_THREADPOOL_THREAD_COUNT``
threads (default ``min(32, cores + 4)``), asynchronous ones on this process's one event loop; each
Service Bus function takes up to host.json's ``maxConcurrentCalls`` messages at once, as the host's
per-function message pump does.
Exit codes: 0 after SIGTERM/SIGINT, 2 when the app or its settings do not allow a start (the reason is
on stderr), 1 when importing the app raises or the worker fails unexpectedly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec, TriggerKind, describe
from devhost.host_config import HostSettings, load_host_settings
from devhost.http_host import HostKeys, HttpHost, Identity, PlatformAuth
from devhost.language_worker import AppLoadError, LanguageWorker
from devhost.servicebus_host import ServiceBusHost
from devhost.timer_host import TimerHost

log = logging.getLogger("devhost.worker")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIGURATION = 2
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
# Extra time, past the drain bound, for closing connections before giving up on them.
CLOSE_MARGIN_SECONDS = 5.0
# Settings that turn on key checks when the flags are not given (orders-devhost passes its keys this way).
FUNCTION_KEY_SETTING = "DEVHOST_FUNCTION_KEY"
MASTER_KEY_SETTING = "DEVHOST_MASTER_KEY"
STATS_INTERVAL_SECONDS = 0.5
# App Service authentication, played by the HTTP host when the app is told it is on (the platform's own
# signal, WEBSITE_AUTH_ENABLED): who signs in with which key, and whether clients' principal headers pass.
PLATFORM_AUTH_SETTING = "WEBSITE_AUTH_ENABLED"
IDENTITIES_SETTING = "DEVHOST_IDENTITIES"
TRUST_PRINCIPAL_HEADERS_SETTING = "DEVHOST_TRUST_PRINCIPAL_HEADERS"


def platform_auth(environ: Mapping[str, str]) -> PlatformAuth | None:
    """The emulated platform authentication the settings ask for (None: off).

    ``DEVHOST_IDENTITIES`` is a JSON object: key -> ``{"name", "objectId", "appRoles": [...]}``. Raises
    ConfigurationError when it is not.
    """
    if environ.get(PLATFORM_AUTH_SETTING, "").strip().lower() != "true":
        return None
    try:
        raw = json.loads(environ.get(IDENTITIES_SETTING) or "{}")
        identities = {
            str(key): Identity(str(v["name"]), str(v["objectId"]), tuple(str(r) for r in v["appRoles"]))
            for key, v in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(f"{IDENTITIES_SETTING} is not a JSON object of identities: {exc}") from exc
    trust = environ.get(TRUST_PRINCIPAL_HEADERS_SETTING, "").strip().lower() == "true"
    return PlatformAuth(identities, trust_principal_headers=trust)


def write_execution_stats(path: Path, worker: LanguageWorker) -> None:
    """Write the executions, failures and wall seconds per function to ``path`` (atomically)."""
    body = {
        "executions": dict(worker.executions),
        "failures": dict(worker.failures),
        "seconds": dict(worker.seconds),
        "pid": os.getpid(),
    }
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m devhost.worker",
        description="Serve an Azure Functions Python v2 app's HTTP, Service Bus and timer triggers locally.",
    )
    parser.add_argument("--app-dir", required=True, type=Path, help="directory holding function_app.py")
    parser.add_argument("--worker-id", required=True, help="identifies this worker in log lines")
    parser.add_argument("--http-port", type=int, help="serve HTTP triggers on this port (none: no HTTP)")
    parser.add_argument("--http-host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="DEBUG logs one line per invocation (default INFO)",
    )
    parser.add_argument(
        "--function-key",
        help=f"require this function key (or the master key) on function-level HTTP routes "
        f"(default: ${FUNCTION_KEY_SETTING}; no key at all: nothing is checked)",
    )
    parser.add_argument(
        "--master-key",
        help=f"the master key: opens every route and is the only key for admin-level ones "
        f"(default: ${MASTER_KEY_SETTING})",
    )
    parser.add_argument(
        "--stats-file",
        type=Path,
        help="keep this worker's executions per function in this JSON file ({pid} is replaced by the PID)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=DEFAULT_SHUTDOWN_TIMEOUT,
        help="seconds in-flight invocations get to finish after SIGTERM (default 10)",
    )
    return parser.parse_args(argv)


def configure_logging(worker_id: str, level: str) -> None:
    """Log to stderr, every line prefixed with the worker id."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"[worker {worker_id}] %(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The SDKs chat at INFO; the receive loop reports connection failures itself, so the Service Bus
    # client's own tracebacks for them are noise unless debugging.
    logging.getLogger("azure").setLevel(logging.WARNING)
    logging.getLogger("azure.servicebus.aio").setLevel(
        logging.WARNING if level == "DEBUG" else logging.CRITICAL
    )
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("asyncio").setLevel(logging.WARNING)


class Worker:
    """Loads the app and runs the trigger hosts in one asyncio loop."""

    def __init__(
        self,
        app_dir: Path,
        http_port: int | None = None,
        http_host: str = "127.0.0.1",
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        environ: Mapping[str, str] | None = None,
        keys: HostKeys | None = None,
        stats_file: Path | None = None,
    ) -> None:
        self.app_dir = app_dir.resolve()
        self.stats_file = stats_file
        self.http_port = http_port
        self.http_host = http_host
        self.shutdown_timeout = shutdown_timeout
        self.environ = os.environ if environ is None else environ
        self.keys = keys or HostKeys(
            self.environ.get(FUNCTION_KEY_SETTING) or None, self.environ.get(MASTER_KEY_SETTING) or None
        )
        self.stuck_invocations = 0
        self._stop = asyncio.Event()

    async def prepare(self) -> None:
        """Start the language worker (it imports and indexes the app), read host.json and resolve every
        trigger's settings.

        Raises ConfigurationError for anything that would stop a trigger from working.
        """
        if not self.app_dir.is_dir():
            raise ConfigurationError(f"--app-dir {self.app_dir} is not a directory")
        self.settings: HostSettings = load_host_settings(self.app_dir, self.environ)
        self.worker = LanguageWorker(self.app_dir, self.http_host)
        self.functions = [describe(metadata) for metadata in await self.worker.start()]
        by_kind: dict[TriggerKind, list[FunctionSpec]] = {kind: [] for kind in TriggerKind}
        for spec in self.functions:
            by_kind[spec.trigger].append(spec)
            if spec.trigger is TriggerKind.UNSUPPORTED:
                log.warning("Functions.%s: %s triggers are not served locally", spec.name, spec.trigger_type)
            for binding in spec.other_bindings:
                log.warning(
                    "Functions.%s: %s binding %r is not provided locally; the function gets no value for it",
                    spec.name,
                    binding.type,
                    binding.name,
                )
        http_specs = by_kind[TriggerKind.HTTP]
        if http_specs and self.http_port is None:
            log.info("%d HTTP function(s) not served: no --http-port", len(http_specs))
        log.info("synchronous functions run in %s thread(s)", self.worker.thread_count)
        self.servicebus = ServiceBusHost(
            by_kind[TriggerKind.SERVICE_BUS], self.settings, self.worker, self.environ
        )
        self.timers = TimerHost(by_kind[TriggerKind.TIMER], self.worker, self.environ)
        self.http: HttpHost | None = None
        self.http_socket: socket.socket | None = None
        if self.http_port is not None:
            self.http = HttpHost(
                http_specs, self.settings.route_prefix, self.worker, self.keys, platform_auth(self.environ)
            )
            self.http_socket = self.http.bind(self.http_host, self.http_port)

    async def _write_stats(self) -> None:
        """Keep the stats file current, off the invocation path: rewritten when the counts changed."""
        assert self.stats_file is not None
        written: tuple[dict[str, int], dict[str, int]] | None = None
        while True:
            counts = (dict(self.worker.executions), dict(self.worker.failures))
            if counts != written:
                write_execution_stats(self.stats_file, self.worker)
                written = counts
            await asyncio.sleep(STATS_INTERVAL_SECONDS)

    def request_stop(self, signal_number: int) -> None:
        """Begin a graceful stop (signal handler)."""
        if self._stop.is_set():
            log.info("already stopping (signal %d ignored)", signal_number)
            return
        log.info("received %s: stopping", signal.Signals(signal_number).name)
        self._stop.set()

    def _describe(self) -> str:
        parts = []
        if self.http is not None:
            prefix = f"/{self.settings.route_prefix}" if self.settings.route_prefix else ""
            parts.append(
                f"HTTP on http://{self.http_host}:{self.http_port}{prefix} ({len(self.http.routes)} routes, "
                f"keys {'checked' if self.keys.enforced else 'not checked'}, "
                f"App Service authentication {'played' if self.http.platform else 'off'})"
            )
        for listener in self.servicebus.listeners:
            parts.append(f"Functions.{listener.spec.name} <- Service Bus {listener.entity}")
        for spec in (s for s in self.functions if s.trigger is TriggerKind.TIMER):
            parts.append(f"Functions.{spec.name} <- timer {spec.schedule}")
        return "; ".join(parts) or "no functions to serve"

    async def run(self) -> int:
        """Serve until a stop is requested, then drain and close. Returns the exit code."""
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, self.request_stop, signal_number)
        self.servicebus.start()
        self.timers.start()
        http_task: asyncio.Task[None] | None = None
        if self.http is not None and self.http_socket is not None:
            http_task = asyncio.create_task(
                self.http.serve(self.http_socket, self.shutdown_timeout), name="http"
            )
        log.info("ready: %s", self._describe())
        stats_task = asyncio.create_task(self._write_stats(), name="stats") if self.stats_file else None

        stop_task = asyncio.create_task(self._stop.wait())
        watched: set[asyncio.Future[Any]] = {stop_task}
        if http_task is not None:
            watched.add(http_task)
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        exit_code = EXIT_OK
        if http_task is not None and http_task.done() and not self._stop.is_set():
            # The HTTP server ended on its own: that is a failure, not a requested stop.
            log.error("the HTTP server stopped unexpectedly", exc_info=http_task.exception())
            exit_code = EXIT_FAILURE
        stop_task.cancel()

        started = loop.time()
        deadline = started + self.shutdown_timeout
        self.timers.stop()
        if self.http is not None:
            self.http.stop()
        await self.servicebus.stop(deadline)
        stopping = [
            asyncio.create_task(self.servicebus.wait_stopped()),
            asyncio.create_task(self.timers.wait_stopped()),
        ]
        if http_task is not None:
            stopping.append(http_task)
        _, pending = await asyncio.wait(stopping, timeout=self.shutdown_timeout + CLOSE_MARGIN_SECONDS)
        for task in pending:
            task.cancel()
        self.stuck_invocations = self.worker.running
        if stats_task is not None and self.stats_file is not None:
            stats_task.cancel()
            write_execution_stats(self.stats_file, self.worker)
        if self.stuck_invocations:
            log.warning(
                "%d invocation(s) still running after %.0fs; exiting anyway",
                self.stuck_invocations,
                loop.time() - started,
            )
        self.worker.stop()
        log.info("stopped")
        return exit_code


async def _serve(worker: Worker) -> int:
    # One event loop for the app's whole life: the runtime runs async functions on the loop that indexed it.
    await worker.prepare()
    return await worker.run()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a worker from the command line; returns the process exit code."""
    args = parse_args(argv)
    configure_logging(str(args.worker_id), args.log_level)
    keys = None
    if args.function_key or args.master_key:
        keys = HostKeys(args.function_key, args.master_key)
    stats_file = Path(str(args.stats_file).replace("{pid}", str(os.getpid()))) if args.stats_file else None
    worker = Worker(
        args.app_dir, args.http_port, args.http_host, args.shutdown_timeout, keys=keys, stats_file=stats_file
    )
    try:
        code = asyncio.run(_serve(worker))
    except ConfigurationError as exc:
        log.error("cannot start: %s", exc)
        return EXIT_CONFIGURATION
    except AppLoadError as exc:
        log.critical("cannot start: loading the app failed: %s", exc)
        return EXIT_FAILURE
    except Exception:
        log.critical("the worker failed", exc_info=True)
        code = EXIT_FAILURE
    if worker.stuck_invocations:
        # Threads still running user code would keep the interpreter from exiting; the bound was reached.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
