"""The formats of what the engine stores and sends, and which of them this release reads.

A release reads the formats of the release before it and passes over, without failing, what a later
release writes (docs/upgrading.md). A format number changes only when what is stored or sent changes in a
way a reader of the previous number would misread; adding a field that readers may ignore is not one.

- **Messages** (:mod:`engine.messages`) carry their format in a ``format`` field. Format 1 is release
  1.0.0's, whose readers refuse any field they do not know, so format 1 is written as the field's absence;
  a later format names itself, and is written only once every instance reads it (the switch).
- **The task's records** in the state store (state, steps, input, the history's and parking's one-entity
  copies) carry a ``Format`` property; absent, they are 1.0.0's, format 1. Format 2 adds sealed sensitive
  values and keyed body hashes; it is written once the deployment's switch (:class:`Formats`) says so.

What this release cannot read (a later format, an unknown kind or outcome, a corrupted record) raises
:class:`NotUnderstood`: a message is passed over (sent again later, for an instance that reads it) and a
record is passed over by sweeps and answered as such by reads, each reported with the order named
(the ``NotUnderstood`` event). Nothing of it is dead-lettered, aborts a sweep or fails a read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from .errors import NotUnderstood

log = logging.getLogger("engine.formats")

# The newest message format this release reads, and the one it writes.
MESSAGES_READ = 1
MESSAGES_WRITTEN = 1
# The formats of the task's stored records. Format 2 may hold sealed sensitive values and keyed body hashes
# (engine.sealing), which release 1.0.0 (format 1) would misread: it is written only after the switch.
RECORDS_READ = 2
BEFORE_SWITCH = 1  # what the release before reads: written until the switch
AFTER_SWITCH = 2  # this release's own
# The stored property naming a record's format.
FORMAT_PROPERTY = "Format"
# On an upgrade, how long this release runs before the switch flips by itself: longer than any rollout
# takes to replace the previous release's instances (docs/upgrading.md). A rollback is safe until then.
SWITCH_AFTER = timedelta(minutes=30)
# How often an instance reads the switch again, and says it runs (which formats it reads).
SWITCH_REFRESH = timedelta(seconds=30)
# The switch flips by itself only once no instance that reads no more than the previous formats has said
# so for this long; an instance that said nothing for a day is forgotten.
UNSEEN_FOR = timedelta(minutes=5)
FORGOTTEN_AFTER = timedelta(days=1)

__all__ = [
    "AFTER_SWITCH",
    "BEFORE_SWITCH",
    "FORMAT_PROPERTY",
    "MESSAGES_READ",
    "MESSAGES_WRITTEN",
    "RECORDS_READ",
    "Formats",
    "Instance",
    "NotUnderstood",
    "Switch",
    "SwitchStore",
    "record_format",
]


@dataclass(frozen=True)
class Switch:
    """The deployment's formats switch, as the state store keeps it: which record format it writes now;
    while it writes the previous release's, when it flips by itself (None: held by an operator)."""

    writes: int
    flips_at: datetime | None = None
    etag: str | None = None

    def due(self, now: datetime) -> bool:
        return self.writes < AFTER_SWITCH and self.flips_at is not None and self.flips_at <= now


class SwitchStore(Protocol):
    """Where the switch is kept (the state store)."""

    async def read_switch(self) -> Switch | None:
        """The switch, or None if no release has set it yet."""
        ...

    async def write_switch(self, switch: Switch) -> Switch | None:
        """Insert the switch (no ``etag``) or replace it (conditional on ``etag``); None if another
        instance wrote it first."""
        ...

    async def holds_tasks(self) -> bool:
        """Whether any task was ever stored (an upgrade, not a new deployment)."""
        ...

    async def announce(self, instance: Instance) -> None:
        """Say that ``instance`` runs now (written over its earlier word)."""
        ...

    async def instances(self) -> list[Instance]:
        """Every instance that said it runs (release 1.0.0's never do)."""
        ...

    async def forget(self, instance: Instance) -> None:
        """Forget an instance that has said nothing for long."""
        ...


@dataclass(frozen=True)
class Instance:
    """An instance's word that it runs: its release, the newest record format it reads, when, and the
    workflow versions it serves (``<workflow>@<version>``; None: a word that does not say)."""

    name: str
    release: str
    reads: int
    seen_at: datetime
    serves: frozenset[str] | None = None


class Formats:
    """Which record format this instance writes now, read from the switch and read again now and then.

    The first instance of this release on a store sets the switch: on a new deployment (no task stored) to
    this release's format at once; on an upgrade to the previous release's, flipping by itself
    :data:`SWITCH_AFTER` later, once no instance that reads only the previous formats has said it runs for
    :data:`UNSEEN_FOR` (each instance says so when it reads the switch). An operator may flip it at once or
    hold it (``python -m orders.formats_switch``).
    Every instance reads both formats whatever the switch says, so instances that read it at different
    moments never disagree on what they can read.

    Each instance also says which workflow versions it serves (``serves``, ``<workflow>@<version>``), and
    :meth:`served_by_all` answers whether every instance that may claim an order serves one: those that
    said so within :data:`UNSEEN_FOR`, and, until the switch flips, the release before's (``before``, what
    it declared; it says nothing itself). New orders take the newest version that all of them serve
    (``engine.workflow.WorkflowCatalog.for_new``), so a rolling deployment that adds a version never
    sends a new order to an instance that would put it in Error as not deployed."""

    def __init__(
        self,
        writes: int = AFTER_SWITCH,
        store: SwitchStore | None = None,
        instance: str = "",
        release: str = "",
        serves: frozenset[str] = frozenset(),
        before: frozenset[str] | None = None,
    ) -> None:
        self.writes = writes
        self._store = store
        self._instance = instance
        self._release = release
        self._serves = serves
        self._before = before
        # What each other instance seen lately serves (None: it did not say), read with the switch.
        self._others: list[frozenset[str] | None] = []
        self._read_at: datetime | None = None

    def served_by_all(self, version: str) -> bool:
        """Whether every instance that may claim an order serves ``version`` (``<workflow>@<version>``):
        the others seen lately and, until the switch flips, the release before's. True without a store
        (one process: itself)."""
        if self._store is None:
            return True
        if self.writes < AFTER_SWITCH and self._before is not None and version not in self._before:
            return False
        # An instance that did not say what it serves serves what the release before did, at most.
        known = [self._before if serves is None else serves for serves in self._others]
        return all(serves is None or version in serves for serves in known)

    @property
    def seals(self) -> bool:
        """Whether sensitive values are sealed and body hashes keyed (format 2)."""
        return self.writes >= AFTER_SWITCH

    async def refresh(self, now: datetime) -> None:
        """Read the switch again if it was read more than :data:`SWITCH_REFRESH` ago (set it, the first
        time; flip it, once due)."""
        if self._store is None or (self._read_at is not None and now - self._read_at < SWITCH_REFRESH):
            return
        self._read_at = now
        try:
            if self._instance:
                await self._store.announce(
                    Instance(self._instance, self._release, RECORDS_READ, now, self._serves)
                )
            switch, lately = await self._settle(self._store, now)
        except Exception:  # the store unreachable: what it wrote so far, until the next read
            log.warning(
                "could not read the formats switch; still writing format %d", self.writes, exc_info=True
            )
            return
        if switch.writes != self.writes:
            log.info("the formats switch says format %d (was %d)", switch.writes, self.writes)
        self.writes = min(switch.writes, AFTER_SWITCH)
        self._others = [i.serves for i in lately if i.name != self._instance]

    async def withdraw(self) -> None:
        """Take back this instance's word as it stops, so that new orders need not wait :data:`UNSEEN_FOR`
        for versions only it lacked (an instance that crashes is forgotten by that silence instead)."""
        if self._store is None or not self._instance:
            return
        try:
            await self._store.forget(Instance(self._instance, self._release, RECORDS_READ, datetime.min))
        except Exception:  # the store unreachable: its silence says the same, later
            log.warning("could not take back this instance's word", exc_info=True)

    @staticmethod
    async def settle(store: SwitchStore, now: datetime) -> Switch:
        """The switch as it stands, set or flipped first if it is time to."""
        return (await Formats._settle(store, now))[0]

    @staticmethod
    async def _settle(store: SwitchStore, now: datetime) -> tuple[Switch, list[Instance]]:
        """:meth:`settle`, and the instances that said they run within :data:`UNSEEN_FOR` (read once)."""
        switch = await store.read_switch()
        if switch is None:
            if await store.holds_tasks():
                wanted = Switch(BEFORE_SWITCH, now + SWITCH_AFTER)
            else:
                wanted = Switch(AFTER_SWITCH)
            switch = await store.write_switch(wanted) or await store.read_switch() or wanted
        lately = await Formats._seen_lately(store, now)  # and forgets the long silent
        # An instance that cannot read this release's formats holds the flip (release 1.0.0's say nothing:
        # the switch's delay covers them).
        older = any(instance.reads < AFTER_SWITCH for instance in lately)
        if switch.due(now) and not older:
            flipped = await store.write_switch(replace(switch, writes=AFTER_SWITCH, flips_at=None))
            switch = flipped or await store.read_switch() or switch
        return switch, lately

    @staticmethod
    async def _seen_lately(store: SwitchStore, now: datetime) -> list[Instance]:
        """The instances that said they run within :data:`UNSEEN_FOR`; those silent for
        :data:`FORGOTTEN_AFTER` are forgotten."""
        lately = []
        for instance in await store.instances():
            if now - instance.seen_at > FORGOTTEN_AFTER:
                await store.forget(instance)
            elif now - instance.seen_at <= UNSEEN_FOR:
                lately.append(instance)
        return lately


def record_format(value: object) -> int:
    """The format of a stored record from its ``Format`` property (absent: 1.0.0's, 1); raises
    :class:`NotUnderstood` for a later one or a value that is not a format."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NotUnderstood(f"its {FORMAT_PROPERTY} is not a format: {value!r}")
    if value > RECORDS_READ:
        raise NotUnderstood(f"it is stored in format {value}; this release reads up to {RECORDS_READ}")
    return value
