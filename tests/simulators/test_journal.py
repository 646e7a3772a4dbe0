"""The file ledger's journal: replay over the snapshot, a torn last line, compaction, crashes in between."""

from __future__ import annotations

import asyncio
import json
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulators.ledger import JOURNAL_FILE_NAME, LEDGER_FILE_NAME, Ledger, LedgerError
from simulators.models import ServiceName
from tests.simulators.helpers import FIRST, LAST, SECOND, UNDECLARED

# Three services of the declaration (one may play several roles when fewer are declared).
ONE, TWO, THREE = FIRST.name, LAST.name, SECOND.name
# Entries as ``change`` makes them, less their change numbers (see ``numbered``).
APPLIED = {
    "orderId": "o-1",
    "applied": 1,
    "compensated": 0,
    "result": {},
    "carried": {},
    "undoCarried": None,
    "traceIds": [],
}
COMPENSATED = {**APPLIED, "compensated": 1, "undoCarried": {}}
# An entry as a ledger before results (format 2) wrote it.
OLDER = {"orderId": "o-1", "applied": 1, "compensated": 0}


def numbered(entry: dict[str, Any], applied: int, compensated: int | None = None) -> dict[str, Any]:
    """``entry`` with the numbers of its apply and its undo."""
    return {**entry, "appliedSeq": applied, "compensatedSeq": compensated}


def plain(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Entries by key without their change numbers."""
    return {key: {k: v for k, v in e.items() if not k.endswith("Seq")} for key, e in entries.items()}


def change(ledger: Ledger, *changes: tuple[str, ServiceName, str]) -> None:
    """Make ``("apply" | "compensate", service, key)`` changes, each answered as changed."""

    async def scenario() -> None:
        for verb, service, key in changes:
            if verb == "apply":
                assert (await ledger.apply(service, key, "o-1")).changed
            else:
                assert (await ledger.compensate(service, key)).changed

    asyncio.run(scenario())


def reload(data_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """What a start finds in ``data_dir``."""
    ledger = Ledger.load(data_dir)
    ledger.close()
    return ledger.snapshot()


def journal_lines(data_dir: Path) -> list[dict[str, Any]]:
    """The journal's lines, parsed."""
    text = (data_dir / JOURNAL_FILE_NAME).read_text()
    return [json.loads(line) for line in text.splitlines()]


def snapshot_file(data_dir: Path) -> dict[str, Any]:
    """The snapshot file, parsed."""
    return json.loads((data_dir / LEDGER_FILE_NAME).read_text())


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    """An empty ledger in ``tmp_path`` that never compacts while running; closed at the end."""
    opened = Ledger.load(tmp_path, compact_after=1_000_000)
    yield opened
    opened.close()


def test_each_change_is_one_numbered_journal_line(ledger: Ledger, tmp_path: Path) -> None:
    change(ledger, ("apply", ONE, "p"), ("apply", TWO, "s"), ("compensate", ONE, "p"))

    assert journal_lines(tmp_path) == [
        {"seq": 1, "service": ONE, "key": "p", "entry": numbered(APPLIED, 1)},
        {"seq": 2, "service": TWO, "key": "s", "entry": numbered(APPLIED, 2)},
        {"seq": 3, "service": ONE, "key": "p", "entry": numbered(COMPENSATED, 1, 3)},
    ]
    # No snapshot until a compaction: the journal alone holds the changes.
    assert not (tmp_path / LEDGER_FILE_NAME).exists()


def test_a_start_replays_the_journal_and_compacts_it(ledger: Ledger, tmp_path: Path) -> None:
    change(ledger, ("apply", ONE, "b"), ("apply", ONE, "a"), ("compensate", ONE, "b"))
    ledger.close()

    restored = Ledger.load(tmp_path)
    try:
        assert restored.snapshot()[ONE] == {"a": numbered(APPLIED, 2), "b": numbered(COMPENSATED, 1, 3)}
        # Keys in sorted order after a start, as the ledger file always gave them.
        assert list(restored.snapshot()[ONE]) == ["a", "b"]
        assert snapshot_file(tmp_path)["sequence"] == 3
        assert (tmp_path / JOURNAL_FILE_NAME).read_bytes() == b""
        # Numbering goes on after the snapshot's last change.
        change(restored, ("apply", THREE, "i"))
        assert [line["seq"] for line in journal_lines(tmp_path)] == [4]
    finally:
        restored.close()
    assert reload(tmp_path)[THREE]["i"] == numbered(APPLIED, 4)


def test_a_torn_last_line_is_ignored_and_removed(ledger: Ledger, tmp_path: Path) -> None:
    change(ledger, ("apply", ONE, "p"))
    ledger.close()
    whole = (tmp_path / JOURNAL_FILE_NAME).read_bytes()
    # A crash part way through appending change 2: every prefix of its line short of the newline.
    record = {"seq": 2, "service": ONE, "key": "q", "entry": numbered(APPLIED, 2)}
    line = json.dumps(record, separators=(",", ":")).encode()
    for cut in (1, len(line) // 2, len(line)):
        (tmp_path / JOURNAL_FILE_NAME).write_bytes(whole + line[:cut])
        (tmp_path / LEDGER_FILE_NAME).unlink(missing_ok=True)

        restored = Ledger.load(tmp_path)
        try:
            assert restored.snapshot()[ONE] == {"p": numbered(APPLIED, 1)}
            assert (tmp_path / JOURNAL_FILE_NAME).read_bytes() == b""
            # The next change is number 2 again, on a clean journal.
            change(restored, ("apply", ONE, "q"))
            assert journal_lines(tmp_path) == [record]
        finally:
            restored.close()
        assert reload(tmp_path)[ONE] == {"p": numbered(APPLIED, 1), "q": numbered(APPLIED, 2)}


def line(seq: int, service: str = LAST.name, order: str = "o", compensated: int = 0, **fields: Any) -> str:
    """One journal line about key ``p``."""
    entry = {"orderId": order, "applied": 1, "compensated": compensated, **fields}
    return json.dumps({"seq": seq, "service": service, "key": "p", "entry": entry})


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([line(1), "x"], "line 2"),
        (["", line(1)], "line 1"),
        ([line(2)], "skips"),
        ([line(1, service=UNDECLARED)], "line 1"),
        ([line(1, compensated=1)], "no apply"),
        ([line(1), line(2, order="other", compensated=1)], "no apply"),
        ([line(1, result={"a": 1}), line(2, compensated=1, result={"a": 2})], "no apply"),
        ([line(1, appliedSeq=7)], "no apply"),
        ([line(1, undoCarried={})], "no apply"),
        ([line(1), line(2, compensated=1, compensatedSeq=9)], "no apply"),
        ([line(1), line(2)], "no apply"),
        ([line(1, traceIds=["a" * 32]), line(2, traceIds=["b" * 32])], "no apply"),
        ([line(1, traceIds=["a" * 32]), line(2, compensated=1, traceIds=[])], "no apply"),
    ],
    ids=[
        "garbage-line",
        "empty-line",
        "gap",
        "unknown-service",
        "compensated-unapplied",
        "order-changed",
        "result-changed",
        "apply-misnumbered",
        "undo-recorded-unundone",
        "undo-misnumbered",
        "nothing-changed",
        "trace-replaced",
        "trace-dropped-by-undo",
    ],
)
def test_a_damaged_journal_stops_the_start_and_is_left_alone(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    """Only an unfinished last line is a crash's doing; anything else wrong is damage a human must see."""
    content = "".join(line + "\n" for line in lines)
    (tmp_path / JOURNAL_FILE_NAME).write_text(content)

    with pytest.raises(LedgerError, match=message):
        Ledger.load(tmp_path)

    assert (tmp_path / JOURNAL_FILE_NAME).read_text() == content
    assert not (tmp_path / LEDGER_FILE_NAME).exists()


def test_a_first_format_ledger_file_is_read_and_carried_over(tmp_path: Path) -> None:
    first_format = {"version": 1, "services": {ONE: {"p": OLDER}}}
    (tmp_path / LEDGER_FILE_NAME).write_text(json.dumps(first_format))
    ledger = Ledger.load(tmp_path)
    try:
        change(ledger, ("compensate", ONE, "p"))
    finally:
        ledger.close()
    # What was not recorded then stays unknown (null); the undo is recorded as today's are.
    older = {**OLDER, "result": None, "carried": None, "appliedSeq": None, "traceIds": None}
    assert reload(tmp_path)[ONE] == {"p": {**older, "compensated": 1, "undoCarried": {}, "compensatedSeq": 1}}
    assert snapshot_file(tmp_path)["version"] == 4


def test_a_second_format_snapshot_and_journal_are_read_and_carried_over(tmp_path: Path) -> None:
    """A snapshot and a journal written before results: their entries read with the new fields null, and
    later changes are recorded in full."""
    second_format = {"version": 2, "sequence": 1, "services": {ONE: {"p": OLDER}}}
    (tmp_path / LEDGER_FILE_NAME).write_text(json.dumps(second_format))
    lines = [
        {"seq": 2, "service": ONE, "key": "q", "entry": OLDER},
        {"seq": 3, "service": ONE, "key": "p", "entry": {**OLDER, "compensated": 1}},
    ]
    (tmp_path / JOURNAL_FILE_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))

    ledger = Ledger.load(tmp_path)
    try:
        change(ledger, ("compensate", ONE, "q"), ("apply", ONE, "r"))
    finally:
        ledger.close()

    unknown = {
        "result": None,
        "carried": None,
        "undoCarried": None,
        "appliedSeq": None,
        "compensatedSeq": None,
        "traceIds": None,
    }
    assert reload(tmp_path)[ONE] == {
        "p": {**OLDER, **unknown, "compensated": 1},
        "q": {**OLDER, **unknown, "compensated": 1, "undoCarried": {}, "compensatedSeq": 4},
        "r": numbered(APPLIED, 5),
    }
    assert (snapshot_file(tmp_path)["version"], snapshot_file(tmp_path)["sequence"]) == (4, 5)


def test_what_a_change_records_is_kept_across_a_restart(ledger: Ledger, tmp_path: Path) -> None:
    async def scenario() -> None:
        applied = await ledger.apply(ONE, "p", "o-1", result={"thingId": "t-1"}, carried={"chargeId": "c"})
        assert applied.changed
        # A replay changes nothing, whatever it carries: the first apply's record stands.
        again = await ledger.apply(ONE, "p", "o-1", result={"thingId": "t-2"}, carried={"chargeId": "d"})
        assert not again.changed and again.entry == applied.entry
        assert (await ledger.compensate(ONE, "p", carried={"thingId": "t-1"})).changed
        assert not (await ledger.compensate(ONE, "p", carried={"thingId": "other"})).changed

    asyncio.run(scenario())
    ledger.close()

    expected = {
        "orderId": "o-1",
        "applied": 1,
        "compensated": 1,
        "result": {"thingId": "t-1"},
        "carried": {"chargeId": "c"},
        "undoCarried": {"thingId": "t-1"},
        "appliedSeq": 1,
        "compensatedSeq": 2,
        "traceIds": [],
    }
    assert reload(tmp_path)[ONE] == {"p": expected}


TRACE_A, TRACE_B = "a" * 32, "b" * 32


def test_a_trace_new_to_an_entry_is_a_change_of_its_own_and_kept_across_a_restart(
    ledger: Ledger, tmp_path: Path
) -> None:
    """A replay or a repeated undo changes nothing but adds the trace it came in, when the entry has not
    seen it: a journal line of its own, whose number neither the apply's nor the undo's is."""

    async def scenario() -> None:
        assert (await ledger.apply(ONE, "p", "o-1", trace_id=TRACE_A)).changed
        again = await ledger.apply(ONE, "p", "o-1", trace_id=TRACE_A)
        assert not again.changed and again.entry is not None and again.entry.trace_ids == (TRACE_A,)
        replayed = await ledger.apply(ONE, "p", "o-1", trace_id=TRACE_B)
        assert not replayed.changed and replayed.entry is not None
        assert replayed.entry.trace_ids == (TRACE_A, TRACE_B)
        assert (await ledger.compensate(ONE, "p", trace_id=TRACE_A)).changed
        assert not (await ledger.compensate(ONE, "p", trace_id="c" * 32)).changed

    asyncio.run(scenario())

    traces = [line["entry"]["traceIds"] for line in journal_lines(tmp_path)]
    assert traces == [[TRACE_A], [TRACE_A, TRACE_B], [TRACE_A, TRACE_B], [TRACE_A, TRACE_B, "c" * 32]]
    ledger.close()
    expected = {**numbered(COMPENSATED, 1, 3), "traceIds": [TRACE_A, TRACE_B, "c" * 32]}
    assert reload(tmp_path)[ONE] == {"p": expected}


def test_the_running_ledger_compacts_once_the_journal_is_as_large_as_the_snapshot(tmp_path: Path) -> None:
    ledger = Ledger.load(tmp_path, compact_after=3)
    try:
        change(ledger, ("apply", ONE, "k0"), ("apply", ONE, "k1"))
        assert len(journal_lines(tmp_path)) == 2
        change(ledger, ("apply", ONE, "k2"))
        # Three lines, at least ``compact_after``: compacted.
        assert journal_lines(tmp_path) == []
        assert snapshot_file(tmp_path)["sequence"] == 3
        assert set(snapshot_file(tmp_path)["services"][ONE]) == {"k0", "k1", "k2"}
        # Three entries in the snapshot: three more lines.
        change(ledger, ("apply", ONE, "k3"), ("apply", ONE, "k4"))
        assert len(journal_lines(tmp_path)) == 2
        change(ledger, ("compensate", ONE, "k0"))
        assert journal_lines(tmp_path) == []
        assert snapshot_file(tmp_path)["sequence"] == 6
        # Five entries now: new keys only (the ledger grows as fast as the journal) still get there.
        change(ledger, *[("apply", ONE, f"k{n}") for n in range(5, 9)])
        assert len(journal_lines(tmp_path)) == 4
        change(ledger, ("apply", ONE, "k9"))
        assert journal_lines(tmp_path) == []
        assert snapshot_file(tmp_path)["sequence"] == 11
        assert sorted(path.name for path in tmp_path.iterdir()) == [JOURNAL_FILE_NAME, LEDGER_FILE_NAME]
        expected = ledger.snapshot()
    finally:
        ledger.close()
    assert reload(tmp_path) == expected


STEPS = ["snapshot written", "snapshot renamed", "journal emptied"]


@pytest.mark.parametrize("done", range(len(STEPS) + 1), ids=["before"] + [f"after {step}" for step in STEPS])
def test_a_crash_between_compaction_steps_loses_nothing(tmp_path: Path, done: int) -> None:
    # A snapshot holding changes 1-2, then changes 3-5 in the journal, one of them undoing a snapshot key.
    first = Ledger.load(tmp_path, compact_after=1_000_000)
    change(first, ("apply", ONE, "old"), ("apply", THREE, "kept"))
    first.close()
    ledger = Ledger.load(tmp_path, compact_after=1_000_000)
    undo_old, new, undo_new = (
        ("compensate", ONE, "old"),
        ("apply", ONE, "new"),
        ("compensate", ONE, "new"),
    )
    change(ledger, undo_old, new, undo_new)
    expected = ledger.snapshot()
    assert snapshot_file(tmp_path)["sequence"] == 2 and len(journal_lines(tmp_path)) == 3

    steps = ledger.compaction_steps()
    assert [next(steps) for _ in range(done)] == STEPS[:done]
    # The crash: the process stops here; its files stay as they are (only its descriptor goes).
    ledger.close()
    temporaries = [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
    assert len(temporaries) == (1 if done == 1 else 0)
    assert snapshot_file(tmp_path)["sequence"] == (5 if done >= 2 else 2)
    assert len(journal_lines(tmp_path)) == (0 if done == 3 else 3)

    restored = Ledger.load(tmp_path, compact_after=1_000_000)
    try:
        assert restored.snapshot() == expected
        assert sorted(path.name for path in tmp_path.iterdir()) == [JOURNAL_FILE_NAME, LEDGER_FILE_NAME]
        # The next change follows the last one made before the crash, and each key still changes once.
        assert not asyncio.run(restored.compensate(ONE, "old")).changed
        change(restored, ("apply", TWO, "after"))
        assert journal_lines(tmp_path)[0]["seq"] == 6
    finally:
        restored.close()
    assert reload(tmp_path) == {**expected, TWO: {**expected[TWO], "after": numbered(APPLIED, 6)}}


def test_a_failed_append_changes_nothing_and_leaves_no_fragment(ledger: Ledger, tmp_path: Path) -> None:
    """A write cut short (the file size limit: part of the line goes down, then EFBIG) is undone."""
    change(ledger, ("apply", ONE, "p"))
    journal = tmp_path / JOURNAL_FILE_NAME
    before = journal.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's kill
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
        with pytest.raises(OSError):
            asyncio.run(ledger.apply(ONE, "q", "o-1"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)

    assert ledger.get(ONE, "q") is None
    assert journal.read_bytes() == before
    change(ledger, ("apply", ONE, "q"))
    assert [line["seq"] for line in journal_lines(tmp_path)] == [1, 2]
    ledger.close()
    assert plain(reload(tmp_path)[ONE]) == {"p": APPLIED, "q": APPLIED}


def test_a_failed_compaction_fails_no_change_and_is_tried_again_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger.load(tmp_path, compact_after=2)
    try:
        # A directory where the snapshot goes: the rename over it fails.
        (tmp_path / LEDGER_FILE_NAME).mkdir()
        change(ledger, ("apply", ONE, "k0"), ("apply", ONE, "k1"))
        assert "cannot compact the ledger" in caplog.text
        assert plain(ledger.snapshot()[ONE]) == {"k0": APPLIED, "k1": APPLIED}
        assert len(journal_lines(tmp_path)) == 2
        assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
        (tmp_path / LEDGER_FILE_NAME).rmdir()
        # Not on the very next change, but once as many changes again are in the journal.
        change(ledger, ("apply", ONE, "k2"))
        assert len(journal_lines(tmp_path)) == 3
        change(ledger, ("apply", ONE, "k3"))
        assert journal_lines(tmp_path) == []
        expected = ledger.snapshot()
    finally:
        ledger.close()
    assert reload(tmp_path) == expected
