"""An asyncio event loop whose clock is virtual: when nothing is ready to run, time jumps to the next timer.

The engine's coroutines run on it unchanged: ``asyncio.sleep`` (tenacity's backoff in the Agent),
``asyncio.timeout`` (the Agent's hard stop at complete-by), ``asyncio.gather`` (the outbox) and
``loop.call_at`` all read :meth:`VirtualLoop.time`, so an hour of simulated traffic costs only the CPU
its callbacks take. Nothing here reads the wall clock, so a run is a pure function of what was scheduled.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

# Simulated time starts here: a fixed instant, so the datetimes a run writes do not depend on the day.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Stalled(RuntimeError):
    """Nothing is ready and no timer is set, yet the run has not finished: every coroutine waits on
    something that can never happen."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no I/O: a wait of ``timeout`` seconds moves the virtual clock instead."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, _fd(fileobj), events, data)
        self._keys[key.fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(_fd(fileobj))

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Stalled("no callback is ready and no timer is set")
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else int(fileobj.fileno())


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (seconds since :data:`EPOCH`)."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        """The virtual time, in seconds."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, landing exactly on the next timer (float sums can fall short
        of it by a rounding error, which would cost a wasted turn of the loop)."""
        if seconds <= 0:
            return
        target = self._virtual_now + seconds
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled:
            target = max(target, scheduled[0].when())
        self._virtual_now = target


class VirtualClock:
    """The engine's :class:`~engine.clock.Clock` on a virtual loop's time."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop
        self._seconds = 0.0
        self._now = EPOCH

    def now(self) -> datetime:
        """The virtual time as an aware UTC datetime (the same object until the loop's time moves: the
        engine asks several times a turn)."""
        seconds = self._loop.time()
        if seconds != self._seconds:
            self._seconds, self._now = seconds, EPOCH + timedelta(seconds=seconds)
        return self._now

    def seconds(self) -> float:
        """The virtual time in seconds since :data:`EPOCH`."""
        return self._loop.time()


def at_seconds(moment: datetime) -> float:
    """A datetime as virtual seconds since :data:`EPOCH`."""
    return (moment - EPOCH).total_seconds()
