"""``servicebus-emulator``: run the local Service Bus broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from .broker import Broker
from .config import ConfigError, load_config
from .stats import OperationStats

DEFAULT_CONFIG = Path("local/servicebus-config.json")


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="servicebus-emulator",
        description="A local Azure Service Bus broker (AMQP 1.0) for the azure-servicebus SDK. "
        "Queues come from a file in the official emulator's Config.json shape. Messages are kept in memory.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="port to listen on (default: 5672)")
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"queue config file (default: {DEFAULT_CONFIG})"
    )
    parser.add_argument(
        "--stats-file",
        type=Path,
        help="write per-queue operation counts (sends, receives, settlements, ...) to this JSON file",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG logs one line per connection and per queue event (default: INFO)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # proton logs every reactor event at DEBUG; keep the emulator's own lines readable.
    logging.getLogger("proton").setLevel(logging.WARNING)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"servicebus-emulator: {exc}", file=sys.stderr)
        return 2
    broker = Broker(config, stats=OperationStats(args.stats_file))

    def stop(signum: int, frame: FrameType | None) -> None:
        broker.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        broker.run(args.host, args.port)
    except OSError as exc:
        print(f"servicebus-emulator: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
