"""Backfills: what a release adds to orders stored before it, written by the deployment itself.

A release that starts keeping something for every order (a listing entry, a search entry, a new
property) declares a backfill for the orders stored before it: a :class:`Backfill`, named once and never
renamed, that goes through the store page by page, shard by shard, and writes what an order lacks. It must
be idempotent (an order that has what it needs is left alone, so a page read twice changes nothing) and
safe beside the running app (an order saved meanwhile got it from that save).

:class:`Backfills` runs them: every run of its timer (the ``backfill`` function) takes each unfinished one
a few pages further, for a bounded time, and records where it is in the state store after every page
(:class:`Progress`), so a crash or a redeployment resumes from the last page. Two instances at it at once
cost a page read twice, nothing more: each saves its progress conditional on the record it read, and the
one that loses stops until the next run. On a store that holds no task (a new deployment) a backfill is
recorded finished at once.

Until a backfill has finished, an answer that depends on it (:data:`Answer`) says so: the API's listings
and counts name the unfinished backfills they depend on (``backfilling``) instead of silently missing
orders stored before the release.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from . import telemetry

log = logging.getLogger("engine.backfill")

# What an answer of the API may depend on: the listing entries by state (listings, counts), the search
# entries (searches).
Answer = Literal["listing", "search"]
# How often an instance reads again whether the backfills it waits for have finished.
REFRESH = timedelta(seconds=30)
BACKFILL_FINISHED = "BackfillFinished"


@dataclass(frozen=True)
class BackfillPage:
    """What one page did: records read, orders changed, orders left (saved meanwhile, or not readable by
    this release), and where the shard goes on (None: the shard is done)."""

    read: int
    changed: int
    skipped: int
    continuation: str | None


class Backfill(Protocol):
    """One backfill: a stable name, the answers that miss orders until it has run, and one page of it."""

    @property
    def name(self) -> str: ...

    @property
    def answers(self) -> frozenset[Answer]: ...

    async def page(self, shard: int, continuation: str | None, size: int) -> BackfillPage:
        """One page of shard ``shard`` from ``continuation`` (None: from its start)."""
        ...


class Progress(BaseModel):
    """Where a backfill is: the shard and the page it goes on from, what it did so far, and when it
    started and finished. ``etag`` is the stored record's (None: not stored yet)."""

    model_config = ConfigDict(frozen=True)

    name: str
    shard: int = 0
    continuation: str | None = None
    read: int = 0
    changed: int = 0
    skipped: int = 0
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    etag: str | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def after(self, page: BackfillPage, shards: int, now: datetime) -> Progress:
        """The progress once ``page`` is done."""
        shard = self.shard + 1 if page.continuation is None else self.shard
        return self.model_copy(
            update={
                "shard": shard,
                "continuation": page.continuation,
                "read": self.read + page.read,
                "changed": self.changed + page.changed,
                "skipped": self.skipped + page.skipped,
                "updated_at": now,
                "finished_at": now if shard >= shards else None,
            }
        )


class ProgressStore(Protocol):
    """Where the backfills' progress is kept (the state store)."""

    @property
    def shards(self) -> int: ...

    async def read_progress(self, name: str) -> Progress | None:
        """The backfill's progress, or None if it never started."""
        ...

    async def write_progress(self, progress: Progress) -> Progress | None:
        """Insert (no ``etag``) or replace (conditional on ``etag``) a backfill's progress; None if another
        instance wrote it first."""
        ...

    async def holds_tasks(self) -> bool:
        """Whether any task was ever stored (an upgrade, not a new deployment)."""
        ...


class Backfills:
    """The declared backfills of a deployment: run a bounded part of each unfinished one
    (:meth:`advance`), and say which answers may be incomplete meanwhile (:meth:`incomplete`)."""

    def __init__(
        self,
        declared: Sequence[Backfill] = (),
        store: ProgressStore | None = None,
        page_size: int = 100,
        max_seconds: float = 20.0,
    ) -> None:
        names = [b.name for b in declared]
        if len(set(names)) != len(names):
            raise ValueError(f"backfills must have distinct names: {names}")
        self.declared = tuple(declared) if store is not None else ()
        self._store = store
        self.page_size = page_size
        self.max_seconds = max_seconds
        # Unfinished as far as this instance knows (every declared one until read): a finished backfill
        # never becomes unfinished, so once all are, nothing is read again.
        self._unfinished = {b.name for b in self.declared}
        self._read_at: datetime | None = None

    def incomplete(self, answer: Answer) -> list[str]:
        """The unfinished backfills ``answer`` depends on, by name (empty: it is complete)."""
        return [b.name for b in self.declared if b.name in self._unfinished and answer in b.answers]

    async def refresh(self, now: datetime) -> None:
        """Read again, at most every :data:`REFRESH`, which backfills have finished (the store
        unreachable: as known so far). On a new deployment this records each finished at once."""
        if self._store is None or not self._unfinished:
            return
        if self._read_at is not None and now - self._read_at < REFRESH:
            return
        self._read_at = now
        try:
            for backfill in self.declared:
                if backfill.name in self._unfinished:
                    progress = await self._progress(self._store, backfill, now)
                    if progress is not None and progress.finished:
                        self._unfinished.discard(backfill.name)
        except Exception:
            log.warning("could not read the backfills' progress", exc_info=True)

    @staticmethod
    async def _progress(store: ProgressStore, backfill: Backfill, now: datetime) -> Progress | None:
        """The backfill's progress; started if it never was (finished at once on a store that holds no
        task). None: another instance started it meanwhile."""
        progress = await store.read_progress(backfill.name)
        if progress is not None:
            return progress
        start = Progress(name=backfill.name, started_at=now, updated_at=now)
        if not await store.holds_tasks():  # a new deployment: nothing stored before it
            start = start.model_copy(update={"shard": store.shards, "finished_at": now})
        return await store.write_progress(start)

    async def advance(self, now: datetime) -> list[Progress]:
        """Take each unfinished backfill further, for at most ``max_seconds`` in all; returns the
        progress of each it touched."""
        deadline = time.monotonic() + self.max_seconds
        touched: list[Progress] = []
        if self._store is None:
            return touched
        for backfill in self.declared:
            if backfill.name not in self._unfinished:
                continue
            progress = await self._run(backfill, now, deadline)
            if progress is None:
                break  # another instance is at it: the rest wait for the next run too
            touched.append(progress)
            if progress.finished:
                self._unfinished.discard(backfill.name)
            elif time.monotonic() >= deadline:
                break
        return touched

    async def _run(self, backfill: Backfill, now: datetime, deadline: float) -> Progress | None:
        assert self._store is not None
        progress = await self._progress(self._store, backfill, now)
        if progress is None:
            return None
        while not progress.finished and time.monotonic() < deadline:
            page = await backfill.page(progress.shard, progress.continuation, self.page_size)
            written = await self._store.write_progress(progress.after(page, self._store.shards, now))
            if written is None:
                return None
            progress = written
        if progress.finished and progress.finished_at == now:
            log.info(
                "backfill %s finished: read %d, changed %d, skipped %d",
                progress.name,
                progress.read,
                progress.changed,
                progress.skipped,
            )
            telemetry.emit_event(
                BACKFILL_FINISHED,
                backfill=progress.name,
                read=progress.read,
                changed=progress.changed,
                skipped=progress.skipped,
            )
        return progress
