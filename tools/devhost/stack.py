"""``orders-devhost``: the whole system on one machine, no cloud, no Docker, no Core Tools.

It starts and supervises, as separate processes: Azurite (Table service), the Service Bus emulator
with the repository's queue config, the remote-service simulators, and N function workers that load
``function_app.py`` unchanged. Worker 1 serves the HTTP triggers. A worker that dies is restarted after
a short delay, as the platform would. ``<data-dir>/devhost.json`` tells which process is which;
``<data-dir>/stats/`` holds the emulator's per-queue operation counts and each worker process's
executions per function (read them with ``devhost.counts.read_counts``). ``<data-dir>/input-encryption.key``
holds the key that seals the orders' sensitive input fields (``INPUT_ENCRYPTION_KEY``), made on the first
start and kept, so that a restart on the same data can still open what the orders hold.

The API is open by default, as under ``func start``. ``--auth roles`` enforces the roles of
``orders.access`` with one key per role, written to ``devhost.json`` (``"keys"``): the submitter's is the
app's submission key, checked by the app as in Azure; the reader's and the operator's sign in an Entra ID
principal with that app role, with the devhost playing App Service authentication (it strips clients'
principal headers and sets its own). ``--trust-principal-headers`` lets clients' principal headers through
instead, so that tests can act as any principal. ``--storefronts web,kiosk`` (with ``--auth roles``)
declares storefronts: each gets its key in ``devhost.json`` (``"keys"``, as ``storefront:<name>``) and its
own status queue ``order-status-<name>`` in the emulator.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

from adapters.otlp_file import spans_path
from engine import InputKey, Timer, queues, wait_seconds
from orders.access import storefront_key_setting, storefronts
from orders.catalog import CATALOG
from orders.settings import CALLBACK_SECRET_SETTINGS, SERVICE_URL_SETTINGS
from orders.telemetry_setup import TELEMETRY_DIR
from servicebus_emulator import launcher as servicebus

from . import azurite
from .counts import SERVICEBUS_STATS
from .releases import package_path
from .timer_host import LOCKS_SETTING

log = logging.getLogger("devhost")

REPO_ROOT = Path(__file__).resolve().parents[2]
QUEUE_CONFIG = REPO_ROOT / "local" / "servicebus-config.json"
RESTART_DELAY_SECONDS = 1.0


def local_wait_settings(timer_seconds: float, approval_seconds: float) -> dict[str, str]:
    """Every app setting a declared wait names, at most ``timer_seconds`` for a timer and
    ``approval_seconds`` for an approval's deadline (never longer than declared): a local run of any
    catalog waits seconds, not the hours a workflow declares for Azure."""
    return {
        name: f"{min(wait_seconds(wait), timer_seconds if isinstance(wait, Timer) else approval_seconds):g}"
        for name, wait in CATALOG.setting_waits().items()
    }


# Defaults for the workers' app settings; anything in the environment wins (so tests can shorten them).
DEFAULT_SETTINGS = {
    "FUNCTIONS_WORKER_RUNTIME": "python",
    "STEP_COMPLETE_BY_SECONDS": "30",
    "SUPERVISOR_SCHEDULE": "*/5 * * * * *",
    "SUPERVISOR_MAX_FAILURES": "3",
    "SUPERVISOR_BACKOFF_SECONDS": "2",
    "SUPERVISOR_MAX_BACKOFF_SECONDS": "30",
    "STATE_TABLE_NAME": "orders",
    # Every declared wait's setting, short so that a local run shows it (the examples' in Azure: 30
    # minutes and a day).
    **local_wait_settings(timer_seconds=2, approval_seconds=20),
    # Waits due more than twice this far off are parked out of the live records (Azure: 10 minutes).
    "WAIT_PARK_HORIZON_SECONDS": "3",
}


AUTH_MODES = ("open", "roles")
# Who the reader's and the operator's keys sign in, with the app roles of the app registration.
ROLE_IDENTITIES = {
    "reader": ("reader (devhost)", "Orders.Reader"),
    "approver": ("approver (devhost)", "Orders.Approver"),
    "operator": ("operator (devhost)", "Orders.Operator"),
}


def role_keys() -> dict[str, str]:
    """A fresh key per role: submitter, reader, approver, operator."""
    return {role: secrets.token_urlsafe(24) for role in ("submitter", *ROLE_IDENTITIES)}


STOREFRONT_KEY_PREFIX = "storefront:"


def storefront_keys(names: list[str]) -> dict[str, str]:
    """A fresh key per storefront, as devhost.json names them (``storefront:<name>``)."""
    return {f"{STOREFRONT_KEY_PREFIX}{name}": secrets.token_urlsafe(24) for name in names}


def storefront_settings(keys: dict[str, str]) -> dict[str, str]:
    """The app settings that declare the storefronts holding these keys: STOREFRONTS and each key."""
    names = [k.removeprefix(STOREFRONT_KEY_PREFIX) for k in keys if k.startswith(STOREFRONT_KEY_PREFIX)]
    if not names:
        return {}
    return {
        "STOREFRONTS": ",".join(names),
        **{storefront_key_setting(n): keys[f"{STOREFRONT_KEY_PREFIX}{n}"] for n in names},
    }


def queue_config_with(base: Path, queues_to_add: list[str], target: Path) -> Path:
    """The emulator's queue config with more status queues (a storefront's own), written to ``target``."""
    if not queues_to_add:
        return base
    config = json.loads(base.read_text())
    [namespace] = config["UserConfig"]["Namespaces"]
    shared = next(q for q in namespace["Queues"] if q["Name"] == queues.STATUS_QUEUE)
    namespace["Queues"] += [
        {"Name": name, "Properties": dict(shared["Properties"])} for name in queues_to_add
    ]
    target.write_text(json.dumps(config, indent=2))
    return target


def auth_settings(mode: str, keys: dict[str, str], trust_principal_headers: bool) -> dict[str, str]:
    """The workers' settings for an auth mode: the app's (API_AUTH, SUBMISSION_KEY, and the platform's
    WEBSITE_AUTH_ENABLED) and the HTTP host's identities."""
    if mode == "open":
        return {"API_AUTH": "open"}
    identities = {
        keys[role]: {
            "name": name,
            "objectId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"devhost:{role}")),
            "appRoles": [app_role],
        }
        for role, (name, app_role) in ROLE_IDENTITIES.items()
    }
    return {
        "API_AUTH": "roles",
        "SUBMISSION_KEY": keys["submitter"],
        "WEBSITE_AUTH_ENABLED": "true",
        "DEVHOST_IDENTITIES": json.dumps(identities),
        "DEVHOST_TRUST_PRINCIPAL_HEADERS": "true" if trust_principal_headers else "false",
        **storefront_settings(keys),
    }


@dataclass
class Child:
    """A process the devhost started."""

    name: str
    command: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start (or restart) the process, appending to its log."""
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO_ROOT
        )

    @property
    def pid(self) -> int:
        """The current PID."""
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by PID, then SIGKILL if it does not exit in time."""
        if self.process is None:
            return
        servicebus.stop(self.process, timeout=timeout)
        if self._log is not None:
            self._log.close()


INPUT_KEY_FILE = "input-encryption.key"
INPUT_KEY_SETTING = "INPUT_ENCRYPTION_KEY"


def input_key(data_dir: Path) -> str:
    """The data folder's key for sensitive input fields (``INPUT_ENCRYPTION_KEY``): read from
    ``<data-dir>/input-encryption.key``, or made there (readable by its owner only) on the first start."""
    path = data_dir / INPUT_KEY_FILE
    if path.is_file():
        return path.read_text(encoding="utf-8").strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    text = InputKey.generate("local").text()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text + "\n")
    return text


class Stack:
    """Starts, watches and stops the local system."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data_dir: Path = args.data_dir.resolve()
        self.log_dir = self.data_dir / "logs"
        self.stats_dir = self.data_dir / "stats"
        self.timer_locks = (
            self.data_dir / "timers"
        )  # each timer function on one worker at a time, as in Azure
        self.telemetry_dir = spans_path(self.data_dir).parent  # where orders-trace reads
        self.azurite: subprocess.Popen[bytes] | None = None
        self.servicebus: subprocess.Popen[bytes] | None = None
        self.simulators: Child | None = None
        self.workers: list[Child] = []
        self._stopping = False
        self.ready = False  # set once worker 1 answers: devhost.json then says "ready": true
        self.keys = role_keys() if args.auth == "roles" else {}
        self.storefronts: list[str] = args.storefronts
        self.keys.update(storefront_keys(self.storefronts))
        # The callback secret of each service that answers later, shared by the workers (which check its
        # callbacks) and the simulators (which sign them); one the environment gives is kept.
        self.callback_secrets = {
            name: os.environ.get(name) or secrets.token_hex(32) for name in CALLBACK_SECRET_SETTINGS.values()
        }

    # ---- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Bring everything up, in dependency order, and wait until the HTTP API answers."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self.timer_locks.mkdir(exist_ok=True)
        a = self.args
        with (self.log_dir / "azurite.log").open("ab") as out:
            self.azurite = azurite.launch(self.data_dir / "azurite", a.azurite_port, log=out)
        log.info("Azurite (tables) on 127.0.0.1:%d, pid %d", a.azurite_port, self.azurite.pid)
        with (self.log_dir / "servicebus.log").open("ab") as out:
            config = queue_config_with(
                QUEUE_CONFIG,
                [queues.status_queue(name) for name in self.storefronts],
                self.data_dir / "servicebus-config.json",
            )
            self.servicebus = servicebus.launch(
                config,
                a.sb_port,
                log=out,
                log_level="DEBUG" if a.verbose else "INFO",
                stats_file=self.stats_dir / SERVICEBUS_STATS,
            )
        log.info("Service Bus emulator on 127.0.0.1:%d, pid %d", a.sb_port, self.servicebus.pid)
        self.simulators = Child(
            "simulators",
            [
                sys.executable,
                "-m",
                "simulators",
                "--host",
                "127.0.0.1",
                "--port",
                str(a.sim_port),
                "--data-dir",
                str(self.data_dir),
            ],
            self.log_dir / "simulators.log",
            env={**os.environ, **self.callback_secrets},
        )
        self.simulators.start()
        self._wait_http(f"http://127.0.0.1:{a.sim_port}/health", self.simulators, "simulators")
        log.info("remote-service simulators on 127.0.0.1:%d, pid %d", a.sim_port, self.simulators.pid)
        if a.hold_formats:
            # Before any worker reads the switch: as a deployment does before the release goes out.
            subprocess.run(
                [sys.executable, "-m", "orders.formats_switch", "--hold"],
                env=self.worker_environment(),
                check=True,
                capture_output=True,
                cwd=REPO_ROOT,
            )
        apps = [a.app_dir] * a.workers + ([a.beside] * a.beside_workers if a.beside is not None else [])
        for n, app_dir in enumerate(apps, start=1):
            worker = self._worker(n, app_dir.resolve())
            worker.start()
            self.workers.append(worker)
        self.write_state()
        self._wait_http(f"http://127.0.0.1:{a.port}/api/health", self.workers[0], "worker 1")
        self.ready = True
        self.write_state()
        log.info("ready: http://127.0.0.1:%d/api (%d worker%s)", a.port, a.workers, "s" * (a.workers > 1))

    def _worker(self, n: int, app_dir: Path) -> Child:
        """Function worker ``n`` on the app in ``app_dir``, importing that app's own packages first (its
        ``src/`` and ``tools/``, the devhost worker too: another release's checkout runs its own code)."""
        a = self.args
        command = [
            sys.executable,
            "-m",
            "devhost.worker",
            "--app-dir",
            str(app_dir),
            "--worker-id",
            str(n),
            "--log-level",
            "DEBUG" if a.verbose else "INFO",
            "--stats-file",
            str(self.stats_dir / f"worker-{n}-{{pid}}.json"),  # one file per process: restarts add up
        ]
        if n == 1:
            command += ["--http-port", str(a.port)]
        env = self.worker_environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_path(app_dir), env.get("PYTHONPATH")]))
        name = f"worker-{n}" + (" (beside)" if n > a.workers else "")
        return Child(name, command, self.log_dir / f"worker-{n}.log", env=env)

    def worker_environment(self) -> dict[str, str]:
        """The workers' settings: the devhost's defaults and connections, overridden by the environment."""
        a = self.args
        sim = f"http://127.0.0.1:{a.sim_port}"
        settings = {
            **DEFAULT_SETTINGS,
            # Every declared service is played by the simulators.
            **dict.fromkeys(SERVICE_URL_SETTINGS.values(), sim),
            "STATE_STORE_CONNECTION": azurite.table_connection_string(a.azurite_port),
            "ServiceBusConnection": servicebus.connection_string(a.sb_port),
            # Where clients (and services that answer later) reach the API: worker 1's HTTP host.
            "PUBLIC_BASE_URL": f"http://127.0.0.1:{a.port}",
            # The workers' spans and metrics (orders-trace reads them); an empty value turns them off.
            TELEMETRY_DIR: str(self.telemetry_dir),
            LOCKS_SETTING: str(self.timer_locks),
        }
        settings.update(os.environ)
        settings.update(self.callback_secrets)
        # The data folder's own key, unless the environment gives one (orders stored under it stay readable).
        if not settings.get(INPUT_KEY_SETTING):
            settings[INPUT_KEY_SETTING] = input_key(self.data_dir)
        # The auth mode is the devhost's to say, whatever the environment holds.
        for name in ("SUBMISSION_KEY", "WEBSITE_AUTH_ENABLED", "DEVHOST_IDENTITIES", "STOREFRONTS"):
            settings.pop(name, None)
        settings.update(auth_settings(a.auth, self.keys, a.trust_principal_headers))
        # The workers take the keys as settings, like the rest of their configuration.
        if a.function_key:
            settings["DEVHOST_FUNCTION_KEY"] = a.function_key
        if a.master_key:
            settings["DEVHOST_MASTER_KEY"] = a.master_key
        return settings

    def _wait_http(self, url: str, child: Child, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError(f"{what} exited during start-up; see {child.log_path}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)  # polling a server that is starting: there is no event to wait on
        raise RuntimeError(f"{what} did not answer {url} within {timeout}s; see {child.log_path}")

    def write_state(self) -> None:
        """``devhost.json``: which PID is which, kept current when a worker is restarted."""
        assert self.azurite and self.servicebus and self.simulators
        state = {
            "azurite": {"pid": self.azurite.pid, "port": self.args.azurite_port},
            "servicebus": {"pid": self.servicebus.pid, "port": self.args.sb_port},
            "simulators": {"pid": self.simulators.pid, "port": self.args.sim_port},
            "workers": [
                {
                    "pid": w.pid,
                    **({"port": self.args.port} if i == 0 else {}),
                    **({"beside": str(self.args.beside)} if i >= self.args.workers else {}),
                }
                for i, w in enumerate(self.workers)
            ],
            "http": f"http://127.0.0.1:{self.args.port}/api",
            "auth": self.args.auth,
            **({"keys": self.keys} if self.keys else {}),
            # Until then the devhost is still starting and gives up if a worker dies.
            "ready": self.ready,
        }
        path = self.data_dir / "devhost.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.touch(mode=0o600)  # it may hold the role keys: for this user only
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)  # readers never see a half-written file

    # ---- watch -----------------------------------------------------------------------------------
    def watch(self) -> int:
        """Restart dead workers until asked to stop; a dead infrastructure process ends the run."""
        while not self._stopping:
            for worker in self.workers:
                if not worker.alive() and not self._stopping:
                    code = worker.process.returncode if worker.process else None
                    log.warning(
                        "%s (pid %s) exited with %s; restarting in %.0fs",
                        worker.name,
                        worker.pid,
                        code,
                        RESTART_DELAY_SECONDS,
                    )
                    time.sleep(RESTART_DELAY_SECONDS)  # the platform's restart delay, deliberately
                    if self._stopping:
                        break
                    worker.restarts += 1
                    worker.start()
                    self.write_state()
                    log.info("%s restarted as pid %d", worker.name, worker.pid)
            for name, process in (("Azurite", self.azurite), ("Service Bus emulator", self.servicebus)):
                if process is not None and process.poll() is not None:
                    log.error("%s exited with %s; stopping", name, process.returncode)
                    return 1
            if self.simulators is not None and not self.simulators.alive():
                log.error("simulators exited; stopping")
                return 1
            time.sleep(0.2)  # a supervision loop polls its children
        return 0

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """Signal handler: leave the watch loop."""
        self._stopping = True

    # ---- stop ------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every component by PID: workers first, then what they depend on."""
        self._stopping = True
        for worker in self.workers:
            worker.stop()
        if self.simulators is not None:
            self.simulators.stop()
        # Azurite saves its data on SIGINT only; on SIGTERM it exits and the latest writes are lost.
        if self.servicebus is not None:
            servicebus.stop(self.servicebus)
        if self.azurite is not None:
            servicebus.stop(self.azurite, signal.SIGINT)
        (self.data_dir / "devhost.json").unlink(missing_ok=True)
        log.info("stopped")


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="orders-devhost", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=7071, help="HTTP port of the functions (default 7071)")
    p.add_argument(
        "--sim-port", type=int, default=7072, help="port of the remote-service simulators (default 7072)"
    )
    p.add_argument(
        "--sb-port", type=int, default=5672, help="port of the Service Bus emulator (default 5672)"
    )
    p.add_argument(
        "--azurite-port", type=int, default=10002, help="port of Azurite's Table service (default 10002)"
    )
    p.add_argument("--workers", type=int, default=1, help="function worker processes (default 1)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".devhost"),
        help="Azurite data, ledger, logs (default .devhost)",
    )
    p.add_argument(
        "--app-dir", type=Path, default=REPO_ROOT, help="folder holding function_app.py (default: the repo)"
    )
    p.add_argument(
        "--beside",
        type=Path,
        help="also run workers of the app in this folder (another release's checkout, its own src/) on the "
        "same storage, emulator and simulators: two releases side by side",
    )
    p.add_argument(
        "--beside-workers", type=int, default=1, help="worker processes of --beside's app (default 1)"
    )
    p.add_argument(
        "--hold-formats",
        action="store_true",
        help="hold the formats switch at the previous release's formats before the workers start (an upgrade "
        "under way: a rollback stays safe; python -m orders.formats_switch --switch flips it)",
    )
    p.add_argument(
        "--function-key",
        help="check keys as Azure does: function-level routes need this key or the master key "
        "(default: $DEVHOST_FUNCTION_KEY; no key at all: nothing is checked, as with Core Tools)",
    )
    p.add_argument(
        "--master-key",
        help="the master key: the only key admin-level routes take (default: $DEVHOST_MASTER_KEY)",
    )
    p.add_argument(
        "--auth",
        choices=AUTH_MODES,
        default=os.environ.get("DEVHOST_AUTH", "open"),
        help="open: anyone may call every route, as with func start (default; $DEVHOST_AUTH); roles: the "
        "API's roles, with one key per role in <data-dir>/devhost.json",
    )
    p.add_argument(
        "--trust-principal-headers",
        action="store_true",
        help="with --auth roles: pass clients' X-MS-CLIENT-PRINCIPAL* headers on as if App Service "
        "authentication had set them (tests acting as an Entra ID principal); otherwise they are removed",
    )
    p.add_argument(
        "--storefronts",
        type=_storefront_names,
        default=[],
        help="with --auth roles: declare these storefronts (comma-separated names), each with its own key "
        "in <data-dir>/devhost.json and its own status queue",
    )
    p.add_argument("--verbose", action="store_true", help="DEBUG logs from the emulator and the workers")
    return p


def _storefront_names(value: str) -> list[str]:
    try:
        return list(storefronts({"STOREFRONTS": value}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``orders-devhost``."""
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("orders-devhost: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.trust_principal_headers and args.auth != "roles":
        print("orders-devhost: --trust-principal-headers needs --auth roles", file=sys.stderr)
        return 2
    if args.storefronts and args.auth != "roles":
        print(
            "orders-devhost: --storefronts needs --auth roles (a storefront is known by its key)",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s devhost: %(message)s", stream=sys.stdout)
    stack = Stack(args)
    signal.signal(signal.SIGTERM, stack.request_stop)
    signal.signal(signal.SIGINT, stack.request_stop)
    try:
        stack.start()
        code = stack.watch()
    except RuntimeError as exc:
        log.error("%s", exc)
        code = 1
    finally:
        stack.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
