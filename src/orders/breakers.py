"""``GET /api/breakers``: every agent's shared circuit breaker, as the agents and the Supervisor see it.

One entry per agent of the workflow, in workflow order; an agent whose breaker was never written (it
never opened) is closed with nulls. The answer is one query of the breakers' partition, whatever the
number of agents. The state is the stored one: ``open`` with an ``openUntil`` in the past means the
breaker waits for its trial call, which the next request to the service makes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from pydantic import Field

from engine import BreakerRecord, BreakerState, BreakerStore

from .api import Reply
from .models import _View


class BreakerView(_View):
    """One service's circuit breaker."""

    service: str
    state: BreakerState
    consecutive_failures: int = Field(
        alias="consecutiveFailures", description="the failures counted when it last opened; 0 when closed"
    )
    opened_at: datetime | None = Field(alias="openedAt", description="when the current outage began")
    open_until: datetime | None = Field(alias="openUntil", description="no instance calls before this")
    probe_by: datetime | None = Field(
        alias="probeBy", description="the deadline of the trial call under way (half-open)"
    )
    updated_at: datetime | None = Field(alias="updatedAt", description="null: never written")


class BreakerList(_View):
    """Every agent's circuit breaker, in workflow order."""

    breakers: list[BreakerView]


def breaker_view(record: BreakerRecord) -> BreakerView:
    """The wire view of a stored (or default closed) record: its fields of the same names."""
    return BreakerView.model_validate(record, from_attributes=True)


class BreakersApi:
    """The breakers route."""

    def __init__(self, services: Sequence[str], store: Callable[[], Awaitable[BreakerStore]]) -> None:
        self.services = tuple(services)
        self._store = store

    async def list(self) -> Reply:
        """200 with one entry per service, closed with nulls where nothing is stored."""
        stored = {r.service: r for r in await (await self._store()).load_all()}
        views = [breaker_view(stored.get(s) or BreakerRecord(s)) for s in self.services]
        return Reply(200, BreakerList(breakers=views).wire())
