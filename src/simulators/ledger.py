"""The ledger: which effects each simulated service has applied and compensated.

The ledger is the simulators' ground truth, the thing a test compares with what the order-processing
system believes happened. So it only ever records what a caller could observe: an entry exists once an
effect has been applied (``applied`` is then 1) and ``compensated`` becomes 1 at most once.

:class:`LedgerStore` is what the simulators need from a ledger. Two stores implement it: :class:`Ledger`
here, a file on the local disk, for the standalone ``remote-simulators`` process (one process, one
file), and ``table_ledger.TableLedger``, a table shared by every instance of a Function App that hosts
the simulators (a file on one instance's disk would let a retry that lands elsewhere apply twice).

In the file ledger, every change is written to a temporary file in the data directory, flushed to disk
and renamed over the ledger file, and only then made visible in memory and answered: a crash leaves
either the old or the new ledger, never half of one, and no caller is told about an effect the file
does not hold.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .models import SERVICES, LedgerEntry, LedgerFile, ServiceName

LEDGER_FILE_NAME = "simulators-ledger.json"

log = logging.getLogger(__name__)

Entries = dict[ServiceName, dict[str, LedgerEntry]]


Snapshot = dict[str, dict[str, dict[str, str | int]]]


class LedgerError(Exception):
    """The ledger file cannot be read: the simulators refuse to start rather than lose what it held."""


class LedgerUnavailable(Exception):
    """The ledger's storage did not answer or refused a request; the ledger is as it was before the call."""


@dataclass(frozen=True)
class Change:
    """The result of an apply or a compensation: the key's entry afterwards, and whether this call changed it.

    ``entry`` is None only for a compensation of a key that was never applied.
    """

    entry: LedgerEntry | None
    changed: bool


class LedgerStore(abc.ABC):
    """Where the simulators record effects: apply once per idempotency key, compensate at most once.

    Implementations must keep these rules when several callers (tasks, processes, instances) act on one
    key at once: exactly one apply of a key reports ``changed``, and exactly one compensation does.
    Failures of the storage raise ``OSError`` or :class:`LedgerUnavailable` and change nothing.
    """

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the ledger is kept, for log lines."""

    @abc.abstractmethod
    async def find(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key, or None if the key was never applied."""

    @abc.abstractmethod
    async def entries(self) -> Snapshot:
        """Every entry in its JSON form, every service present even when it has no entries."""

    @abc.abstractmethod
    async def apply(self, service: ServiceName, key: str, order_id: str) -> Change:
        """Record the effect of ``key`` as applied, unless it already is (then nothing changes)."""

    @abc.abstractmethod
    async def compensate(self, service: ServiceName, key: str) -> Change:
        """Record the effect of ``key`` as compensated: once, and only if it was applied."""


class Ledger(LedgerStore):
    """The applied/compensated state of every key of every service, in a file persisted after each change."""

    def __init__(self, path: Path, entries: Entries | None = None) -> None:
        self.path = path
        self._entries: Entries = {service: {} for service in SERVICES}
        if entries:
            for service, by_key in entries.items():
                self._entries[service].update(by_key)
        # Writes happen in a worker thread; the lock keeps one change (read, write, publish) at a time so
        # two calls with the same key cannot both see it unapplied, and files are renamed in order.
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, data_dir: Path) -> Ledger:
        """The ledger kept in ``data_dir`` (created if missing), or an empty one if there is none yet.

        Raises LedgerError if the file exists but is not a ledger this version can read.
        """
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"cannot create the data directory {data_dir}: {exc}") from exc
        path = data_dir / LEDGER_FILE_NAME
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            raise LedgerError(f"cannot read the ledger {path}: {exc}") from exc
        try:
            stored = LedgerFile.model_validate_json(text)
        except ValidationError as exc:
            raise LedgerError(f"the ledger {path} is not valid: {exc}") from exc
        return cls(path, stored.services)

    @property
    def location(self) -> str:
        """The ledger file."""
        return str(self.path)

    def get(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key, or None if the key was never applied."""
        return self._entries[service].get(key)

    async def find(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key (from memory: the file only ever follows it)."""
        return self.get(service, key)

    async def entries(self) -> Snapshot:
        """Every entry in its JSON form."""
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        """Every entry in its JSON form, every service present even when it has no entries."""
        return {
            service: {key: entry.wire() for key, entry in by_key.items()}
            for service, by_key in self._entries.items()
        }

    def count(self) -> int:
        """How many keys the ledger holds, all services together."""
        return sum(len(by_key) for by_key in self._entries.values())

    async def apply(self, service: ServiceName, key: str, order_id: str) -> Change:
        """Record the effect of ``key`` as applied, unless it already is (then nothing changes)."""
        # Shielded: a request cancelled mid-write (shutdown) must not leave the file ahead of memory.
        return await asyncio.shield(self._apply(service, key, order_id))

    async def compensate(self, service: ServiceName, key: str) -> Change:
        """Record the effect of ``key`` as compensated: once, and only if it was applied."""
        return await asyncio.shield(self._compensate(service, key))

    async def _apply(self, service: ServiceName, key: str, order_id: str) -> Change:
        async with self._lock:
            existing = self._entries[service].get(key)
            if existing is not None:
                return Change(existing, changed=False)
            entry = LedgerEntry(order_id=order_id, applied=1, compensated=0)
            await self._commit(service, key, entry)
            return Change(entry, changed=True)

    async def _compensate(self, service: ServiceName, key: str) -> Change:
        async with self._lock:
            existing = self._entries[service].get(key)
            # A key never applied gets no entry: there is nothing to undo, and the ledger only shows effects.
            if existing is None or existing.compensated:
                return Change(existing, changed=False)
            entry = existing.model_copy(update={"compensated": 1})
            await self._commit(service, key, entry)
            return Change(entry, changed=True)

    async def _commit(self, service: ServiceName, key: str, entry: LedgerEntry) -> None:
        """Write the ledger with one entry set, then make that state the current one."""
        updated: Entries = {name: dict(by_key) for name, by_key in self._entries.items()}
        updated[service][key] = entry
        # If the write fails the in-memory ledger stays as it was, so memory and disk never disagree.
        await asyncio.to_thread(_write_atomically, self.path, _serialize(updated))
        self._entries = updated


def _serialize(entries: Entries) -> str:
    """The ledger file's text."""
    body = {
        "version": 1,
        "services": {
            service: {key: entry.wire() for key, entry in by_key.items()}
            for service, by_key in entries.items()
        },
    }
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader or a crash sees the old file or the new one."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as temp:
            temp.write(text)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    # The rename is durable only once the directory itself is on disk.
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError as exc:  # some filesystems refuse fsync on a directory; the rename is still atomic
        log.debug("fsync of %s failed: %s", path.parent, exc)
    finally:
        os.close(dir_fd)
