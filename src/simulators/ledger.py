"""The ledger: which effects each simulated service has applied and compensated.

The ledger is the simulators' ground truth, the thing a test compares with what the order-processing
system believes happened. So it only ever records what a caller could observe: an entry exists once an
effect has been applied (``applied`` is then 1) and ``compensated`` becomes 1 at most once. With the
apply it records the result values the service answered and the body as received (``carried``); with
the undo, the undo's body; with each, the change's place in the ledger's
order of changes; and the distinct trace ids its calls came in (see ``models.LedgerEntry``).

:class:`LedgerStore` is what the simulators need from a ledger. Two stores implement it: :class:`Ledger`
here, a file on the local disk, for the standalone ``remote-simulators`` process (one process, one
file), and ``table_ledger.TableLedger``, a table shared by every instance of a Function App that hosts
the simulators (a file on one instance's disk would let a retry that lands elsewhere apply twice).

The file ledger keeps two files in its data directory, so that a change costs the same however many
entries the ledger holds:

- the journal (``simulators-ledger.journal``): one JSON line per change, numbered (``seq``), holding the
  key's entry after the change (whose ``appliedSeq`` or ``compensatedSeq`` is that number, so the
  entries say in which order their changes were made; a change that only adds a trace id, a replay's or
  a repeated undo's, changes neither). A change is appended, flushed and fsynced before
  it is made visible in memory and answered, so no caller is told about an effect the journal does not
  hold. A crash in the middle of an append leaves an incomplete last line (no newline yet): that change
  was never answered, and the next start ignores it.
- the snapshot (``simulators-ledger.json``): every entry, and the number of the last change it includes.

A start reads the snapshot, replays the journal's changes numbered after it, and compacts: it writes a
new snapshot (to a temporary file, fsynced, renamed over the old one, the directory fsynced), and only
then empties the journal. A crash between those steps leaves an old snapshot with the whole journal, or
the new snapshot with a journal whose changes it already includes (skipped by their numbers); either
way the same state. The running ledger compacts the same way once the journal holds as many changes as
the snapshot holds entries (and at least :data:`COMPACT_AFTER` changes), so the rewrite's cost, spread
over the changes that led to it, stays constant per change.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .models import SERVICES, JournalRecord, LedgerEntry, LedgerFile, ServiceName, Values

LEDGER_FILE_NAME = "simulators-ledger.json"
JOURNAL_FILE_NAME = "simulators-ledger.journal"
# The fewest changes the journal holds before the running ledger compacts it (beyond that, as many as
# the ledger has entries). About 200 to 300 bytes a line: a journal of a few MB at most before a large ledger.
COMPACT_AFTER = 10_000

log = logging.getLogger(__name__)

Entries = dict[ServiceName, dict[str, LedgerEntry]]


Snapshot = dict[str, dict[str, dict[str, Any]]]
# The snapshot format this version writes (it reads every earlier one too).
FILE_VERSION = 4


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
    async def apply(
        self,
        service: ServiceName,
        key: str,
        order_id: str,
        *,
        result: Values | None = None,
        carried: Values | None = None,
        trace_id: str | None = None,
    ) -> Change:
        """Record the effect of ``key`` as applied with the ``result`` values it answers and the values
        its body ``carried`` (none if not given), unless it already is (then nothing changes: the entry
        keeps what the first apply recorded). Either way the entry keeps ``trace_id``, the trace the call
        came in (see :meth:`models.LedgerEntry.traced`); recording it on an existing entry is best
        effort: a failure to is logged, and the call answered as if it had been recorded."""

    @abc.abstractmethod
    async def compensate(
        self, service: ServiceName, key: str, *, carried: Values | None = None, trace_id: str | None = None
    ) -> Change:
        """Record the effect of ``key`` as compensated with the values the undo's body ``carried``: once,
        and only if it was applied. The entry keeps ``trace_id`` as :meth:`apply` does."""


class Ledger(LedgerStore):
    """The applied/compensated state of every key of every service: a snapshot file and a journal of changes.

    Use :meth:`load`. One ledger at a time changes a data directory (one process, as the standalone
    simulators are): the journal is appended at the end this ledger knows of.
    """

    def __init__(
        self, data_dir: Path, entries: Entries, sequence: int, journal: _Journal, compact_after: int
    ) -> None:
        self.path = data_dir / LEDGER_FILE_NAME
        self._entries = entries
        self._sequence = sequence  # the number of the last change, in the journal or the snapshot
        self._journal = journal
        self._compact_after = compact_after
        # How many journal lines make the next compaction due: as many as the snapshot holds entries
        # (so that rewriting it costs at most two entries per change), and at least ``compact_after``.
        self._due_at = max(compact_after, self.count())
        # Writes happen in a worker thread; the lock keeps one change (append, publish) at a time so two
        # calls with the same key cannot both see it unapplied, and changes are numbered in file order.
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, data_dir: Path, compact_after: int = COMPACT_AFTER) -> Ledger:
        """The ledger kept in ``data_dir`` (created if missing), or an empty one if there is none yet.

        Replays the journal over the snapshot and compacts both into a new snapshot. ``compact_after``
        is the fewest journal lines that make the running ledger compact. Raises LedgerError if the
        files are not a ledger this version can read or cannot be compacted; the files are then left as
        they were.
        """
        if compact_after < 1:
            raise ValueError("compact_after must be at least 1")
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"cannot create the data directory {data_dir}: {exc}") from exc
        journal = _Journal.open(data_dir / JOURNAL_FILE_NAME)
        try:
            _remove_stale_temporaries(data_dir)
            entries, sequence = _read_snapshot(data_dir / LEDGER_FILE_NAME)
            sequence = _replay(journal.path, entries, sequence)
            # Same order as a snapshot read back: ``GET /ledger`` lists keys as it did before a restart.
            entries = {service: dict(sorted(by_key.items())) for service, by_key in entries.items()}
            ledger = cls(data_dir, entries, sequence, journal, compact_after)
            if journal.size:
                try:
                    ledger._compact()
                except OSError as exc:
                    raise LedgerError(f"cannot compact the ledger in {data_dir}: {exc}") from exc
        except BaseException:
            journal.close()
            raise
        return ledger

    @property
    def location(self) -> str:
        """The snapshot file and the journal."""
        return f"{self.path} (journal {self._journal.path})"

    @property
    def journal_path(self) -> Path:
        """The journal file."""
        return self._journal.path

    def close(self) -> None:
        """Close the journal (a later change raises OSError)."""
        self._journal.close()

    def get(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key, or None if the key was never applied."""
        return self._entries[service].get(key)

    async def find(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key (from memory: the files only ever follow it)."""
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

    async def apply(
        self,
        service: ServiceName,
        key: str,
        order_id: str,
        *,
        result: Values | None = None,
        carried: Values | None = None,
        trace_id: str | None = None,
    ) -> Change:
        """Record the effect of ``key`` as applied, unless it already is (then nothing changes but the
        trace ids)."""
        # Shielded: a request cancelled mid-write (shutdown) must not leave the file ahead of memory.
        return await asyncio.shield(
            self._apply(service, key, order_id, dict(result or {}), dict(carried or {}), trace_id)
        )

    async def compensate(
        self, service: ServiceName, key: str, *, carried: Values | None = None, trace_id: str | None = None
    ) -> Change:
        """Record the effect of ``key`` as compensated: once, and only if it was applied."""
        return await asyncio.shield(self._compensate(service, key, dict(carried or {}), trace_id))

    async def _apply(
        self,
        service: ServiceName,
        key: str,
        order_id: str,
        result: Values,
        carried: Values,
        trace_id: str | None,
    ) -> Change:
        async with self._lock:
            existing = self._entries[service].get(key)
            if existing is not None:
                return Change(await self._trace(service, key, existing, trace_id), changed=False)
            # The change's number is the journal line's (the lock holds it until the line is written).
            entry = LedgerEntry(
                order_id=order_id,
                applied=1,
                compensated=0,
                result=result,
                carried=carried,
                applied_seq=self._sequence + 1,
                trace_ids=(),
            ).traced(trace_id)
            await self._commit(service, key, entry)
            return Change(entry, changed=True)

    async def _compensate(
        self, service: ServiceName, key: str, carried: Values, trace_id: str | None
    ) -> Change:
        async with self._lock:
            existing = self._entries[service].get(key)
            # A key never applied gets no entry: there is nothing to undo, and the ledger only shows effects.
            if existing is None:
                return Change(None, changed=False)
            if existing.compensated:
                return Change(await self._trace(service, key, existing, trace_id), changed=False)
            update = {"compensated": 1, "undo_carried": carried, "compensated_seq": self._sequence + 1}
            entry = existing.model_copy(update=update).traced(trace_id)
            await self._commit(service, key, entry)
            return Change(entry, changed=True)

    async def _trace(
        self, service: ServiceName, key: str, existing: LedgerEntry, trace_id: str | None
    ) -> LedgerEntry:
        """``existing`` with ``trace_id`` recorded (a change of its own) if it is new to it; as it was if
        that cannot be written (the call that came with it changes nothing else, so it still succeeds)."""
        traced = existing.traced(trace_id)
        if traced is existing:
            return existing
        try:
            await self._commit(service, key, traced)
        except OSError as exc:
            log.warning("cannot record trace %s on %s key %r: %s", trace_id, service, key, exc)
            return existing
        return traced

    async def _commit(self, service: ServiceName, key: str, entry: LedgerEntry) -> None:
        """Append one change to the journal, then make it the current state; compact when it is due.
        The change is numbered one after the last (as the entry's ``appliedSeq`` or ``compensatedSeq``)."""
        sequence = self._sequence + 1
        line = _journal_line(sequence, service, key, entry)
        # If the append fails the in-memory ledger stays as it was, so memory and disk never disagree.
        await asyncio.to_thread(self._journal.append, line)
        self._sequence = sequence
        self._entries[service][key] = entry
        if self._journal.records >= self._due_at:
            try:
                await asyncio.to_thread(self._compact)
            except OSError as exc:
                # The change itself is on disk: the call succeeded. Tried again after as many changes
                # again, not on every change.
                log.warning("cannot compact the ledger %s: %s", self.path, exc)
                self._due_at = self._journal.records + max(self._compact_after, self.count())

    def compaction_steps(self) -> Iterator[str]:
        """Compact the journal into the snapshot, yielding the name of each step once it is done.

        Callers must hold off changes until the steps are done. A process that stops between two steps
        (a crash) leaves files from which :meth:`load` restores the same state; tests stop here.
        """
        text = _serialize(self._entries, self._sequence)
        temp = _write_temporary(self.path, text)
        yield "snapshot written"
        try:
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_directory(self.path.parent)
        yield "snapshot renamed"
        # Only now: until the new snapshot is in place, the journal is what holds these changes.
        self._journal.truncate()
        yield "journal emptied"

    def _compact(self) -> None:
        for _ in self.compaction_steps():
            pass
        self._due_at = max(self._compact_after, self.count())


class _Journal:
    """The journal file, open for the ledger's lifetime, appended to at the end of its last whole line."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self.size = os.fstat(fd).st_size  # the end of the last whole line: where the next one goes
        self.records = 0  # lines appended since the journal was last emptied
        # True while a failed append may have left part of a line past ``size``.
        self._ragged = False

    @classmethod
    def open(cls, path: Path) -> _Journal:
        """Open the journal, created empty if there is none yet."""
        created = not path.exists()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LedgerError(f"cannot open the ledger journal {path}: {exc}") from exc
        if created:
            _fsync_directory(path.parent)
        return cls(path, fd)

    def append(self, line: bytes) -> None:
        """Write ``line`` after the last whole line and fsync it; on failure, the journal is as it was."""
        if self._ragged:
            self._cut()
        self._ragged = True
        try:
            offset = self.size
            view = memoryview(line)
            while view:
                written = os.pwrite(self._fd, view, offset)
                if written == 0:
                    raise OSError(f"no byte of the journal line could be written to {self.path}")
                view = view[written:]
                offset += written
            os.fsync(self._fd)
        except OSError:
            # Drop the part written, so the next append does not land after a fragment.
            with contextlib.suppress(OSError):
                self._cut()
            raise
        self._ragged = False
        self.size = offset
        self.records += 1

    def truncate(self) -> None:
        """Empty the journal (its changes are in the snapshot)."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.size = 0
        self.records = 0
        self._ragged = False

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _cut(self) -> None:
        os.ftruncate(self._fd, self.size)
        os.fsync(self._fd)
        self._ragged = False


def _journal_line(sequence: int, service: ServiceName, key: str, entry: LedgerEntry) -> bytes:
    # ASCII-escaped JSON: no newline inside a line, whatever the key holds.
    record = {"seq": sequence, "service": service, "key": key, "entry": entry.wire()}
    return (json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")


def _read_snapshot(path: Path) -> tuple[Entries, int]:
    """The snapshot's entries (every service present) and the number of its last change."""
    entries: Entries = {service: {} for service in SERVICES}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return entries, 0
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(f"cannot read the ledger {path}: {exc}") from exc
    try:
        stored = LedgerFile.model_validate_json(text)
    except ValidationError as exc:
        raise LedgerError(f"the ledger {path} is not valid: {exc}") from exc
    for service, by_key in stored.services.items():
        entries[service].update(by_key)
    return entries, stored.sequence


def _replay(path: Path, entries: Entries, sequence: int) -> int:
    """Apply the journal's changes numbered after ``sequence`` to ``entries``; the last number."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger journal {path}: {exc}") from exc
    *lines, tail = data.split(b"\n")
    if tail:
        # Written without its newline: an append cut short by a crash, never answered.
        log.warning("%s: ignoring an incomplete last line of %d bytes", path, len(tail))
    for number, line in enumerate(lines, start=1):
        try:
            record = JournalRecord.model_validate_json(line)
        except ValidationError as exc:
            raise LedgerError(f"the ledger journal {path} is not valid at line {number}: {exc}") from exc
        if record.seq <= sequence:
            continue  # already in the snapshot (a crash came before the journal was emptied)
        if record.seq != sequence + 1:
            raise LedgerError(
                f"the ledger journal {path} skips from change {sequence} to {record.seq} at line {number}"
            )
        existing = entries[record.service].get(record.key)
        if not _follows(existing, record.entry, record.seq):
            raise LedgerError(
                f"the ledger journal {path} at line {number} changes {record.service} key {record.key!r} "
                f"from {existing} to {record.entry}, which no apply or compensation does"
            )
        entries[record.service][record.key] = record.entry
        sequence = record.seq
    return sequence


def _follows(before: LedgerEntry | None, after: LedgerEntry, sequence: int) -> bool:
    """True if one apply or one compensation, change number ``sequence``, turns ``before`` into ``after``;
    or one call that changed nothing but the trace ids (it added some).

    A line of an older journal has no results, carried values, change numbers or trace ids (None): it
    still follows.
    """
    if before is None:
        return (
            after.applied == 1
            and after.compensated == 0
            and after.applied_seq in (None, sequence)
            and after.undo_carried is None
            and after.compensated_seq is None
        )
    known, traces = before.trace_ids or (), after.trace_ids or ()
    if traces[: len(known)] != known:
        return False  # trace ids are only ever added
    if after == before.model_copy(update={"trace_ids": after.trace_ids}):
        return len(traces) > len(known)
    undone = {
        "compensated": 1,
        "undo_carried": after.undo_carried,
        "compensated_seq": after.compensated_seq,
        "trace_ids": after.trace_ids,
    }
    return (
        before.compensated == 0
        and after.compensated_seq in (None, sequence)
        and after == before.model_copy(update=undone)
    )


def _serialize(entries: Entries, sequence: int) -> str:
    """The snapshot file's text."""
    body = {
        "version": FILE_VERSION,
        "sequence": sequence,
        "services": {
            service: {key: entry.wire() for key, entry in by_key.items()}
            for service, by_key in entries.items()
        },
    }
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


def _remove_stale_temporaries(data_dir: Path) -> None:
    """Delete snapshots a crash left unrenamed: they were never the ledger."""
    for stale in data_dir.glob(f".{LEDGER_FILE_NAME}.*.tmp"):
        log.info("removing %s, left by an interrupted compaction", stale)
        with contextlib.suppress(OSError):
            stale.unlink()


def _write_temporary(path: Path, text: str) -> str:
    """Write ``text`` to a new temporary file next to ``path``, fsynced; its name."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as temp:
            temp.write(text)
            temp.flush()
            os.fsync(temp.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    return temp_name


def _fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (the entry is on disk only then)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError as exc:  # some filesystems refuse fsync on a directory; the rename is still atomic
        log.debug("fsync of %s failed: %s", directory, exc)
    finally:
        os.close(dir_fd)
