"""``remote-simulators``: serve the simulators of the declared remote services until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

import uvicorn

from .app import Simulators, create_app
from .ledger import LedgerError
from .models import SERVICES

# How long a shutdown waits for calls still sleeping their latency before cancelling them. Hangs do
# not count: they end as soon as the shutdown starts.
GRACEFUL_SHUTDOWN_SECONDS = 10


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="remote-simulators",
        description=f"Simulators of the declared remote services ({', '.join(SERVICES)}), with idempotent "
        "calls, injectable faults (POST /faults) and a ledger of applied effects (GET /ledger) kept in "
        "--data-dir.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7072, help="port to listen on (default: 7072)")
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="directory of the ledger file (created if missing)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault draws (default: random)")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG logs one line per call with the fault drawn and the status answered (default: INFO)",
    )
    return parser


class Server(uvicorn.Server):
    """uvicorn's server, telling the simulators when shutdown starts so that hanging calls end at once."""

    def __init__(self, config: uvicorn.Config, simulators: Simulators) -> None:
        super().__init__(config)
        self._simulators = simulators

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Release the hanging calls, then shut down as uvicorn does."""
        self._simulators.stop_waiting()
        await super().shutdown(sockets)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m simulators``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        app = create_app(args.data_dir, seed=args.seed)
    except LedgerError as exc:
        print(f"remote-simulators: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level.lower(),
        # None: uvicorn's loggers propagate to the root logger set up above, one format for every line.
        log_config=None,
        lifespan="off",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        # C parser and, where installed (not on Windows), the uvloop event loop: a call is answered in
        # about two thirds of the time h11 on asyncio takes, closer to the zero-latency service it plays.
        http="httptools",
        loop="auto",
    )
    server = Server(config, app.state.simulators)

    # uvicorn installs its own handlers while it serves, and afterwards re-raises the signal it caught
    # with the handlers found before. Those are these: a signal before or after serving also asks the
    # server to stop, instead of killing the process with the default action (exit status -15).
    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
