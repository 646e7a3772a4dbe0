"""Time, injected so the engine's rules can be tested with a controlled clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current UTC time."""

    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to: for tests."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The current (frozen) time."""
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        self._now += timedelta(seconds=seconds)
        return self._now
