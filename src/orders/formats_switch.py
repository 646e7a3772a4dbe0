"""The deployment's formats switch (engine.formats), for whoever deploys (docs/upgrading.md).

    python -m orders.formats_switch            # what the deployment writes now, and when it flips
    python -m orders.formats_switch --switch   # this release's formats from now on (no rollback after)
    python -m orders.formats_switch --hold     # keep the previous release's until --switch (a rollback
                                               # stays safe; the switch no longer flips by itself)

Reads the state store's settings from the environment, as the function app does (STATE_STORE_CONNECTION
or STATE_STORE_ENDPOINT, STATE_TABLE_NAME). Every instance reads the switch again within
engine.formats.SWITCH_REFRESH.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from engine import Formats, Switch, formats

from . import release
from .runtime import Closer, _store
from .settings import Settings, store_settings


async def run(settings: Settings, wanted: str | None, now: datetime) -> Switch:
    """Set the switch as ``wanted`` (``switch``, ``hold``; None: as it stands) and return it."""
    closers: list[Closer] = []
    store = await _store(settings, closers)
    try:
        switch = await Formats.settle(store, now)
        if wanted is not None:
            target = (
                Switch(formats.AFTER_SWITCH) if wanted == "switch" else Switch(formats.BEFORE_SWITCH, None)
            )
            while (written := await store.write_switch(replace(target, etag=switch.etag))) is None:
                switch = await Formats.settle(store, now)  # changed meanwhile: from what it is now
            switch = written
        return switch
    finally:
        for close in closers:
            await close()


def describe(switch: Switch) -> str:
    if switch.writes >= formats.AFTER_SWITCH:
        return (
            f"release {release.VERSION}: writes its own formats (format {switch.writes}); no rollback past it"
        )
    when = f"flips by itself at {switch.flips_at:%Y-%m-%d %H:%M} UTC" if switch.flips_at else "held"
    return (
        f"release {release.VERSION}: writes the previous release's formats (format {switch.writes}); {when}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orders.formats_switch", description=__doc__.split("\n\n")[0]
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--switch", action="store_const", const="switch", dest="wanted")
    action.add_argument("--hold", action="store_const", const="hold", dest="wanted")
    args = parser.parse_args(argv)
    try:
        settings = store_settings()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(describe(asyncio.run(run(settings, args.wanted, datetime.now(UTC)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
