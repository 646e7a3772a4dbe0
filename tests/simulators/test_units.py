"""The pieces without a server: fault bands, fault settings and the ledger's files."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from simulators import FaultSettings, Ledger, LedgerError, Stats, pick_fault
from simulators.faults import Fault, FaultInjector
from simulators.ledger import JOURNAL_FILE_NAME, LEDGER_FILE_NAME
from tests.simulators.helpers import FIRST, LAST, NO_CALLS, UNDECLARED, empty

SETTINGS = FaultSettings.model_validate(
    {"transientRate": 0.1, "permanentRate": 0.2, "hangRate": 0.3, "lostReplyRate": 0.1}
)


@pytest.mark.parametrize(
    ("draw", "fault"),
    [
        (0.0, Fault.TRANSIENT),
        (0.099, Fault.TRANSIENT),
        (0.1, Fault.PERMANENT),
        (0.29, Fault.PERMANENT),
        (0.301, Fault.HANG),
        (0.59, Fault.HANG),
        (0.601, Fault.LOST_REPLY),
        (0.69, Fault.LOST_REPLY),
        (0.701, Fault.NONE),
        (0.999, Fault.NONE),
    ],
)
def test_the_draw_falls_in_one_band(draw: float, fault: Fault) -> None:
    assert pick_fault(SETTINGS, draw, permanent_possible=True) is fault


@pytest.mark.parametrize(
    ("draw", "fault"),
    [
        (0.05, Fault.TRANSIENT),
        (0.101, Fault.HANG),
        (0.39, Fault.HANG),
        (0.401, Fault.LOST_REPLY),
        (0.501, Fault.NONE),
    ],
)
def test_without_permanent_the_other_bands_keep_their_widths(draw: float, fault: Fault) -> None:
    assert pick_fault(SETTINGS, draw, permanent_possible=False) is fault


def test_rates_of_one_always_fault_and_rates_of_zero_never() -> None:
    always = FaultSettings.model_validate({"lostReplyRate": 1})
    assert pick_fault(always, 0.9999999, permanent_possible=True) is Fault.LOST_REPLY
    assert pick_fault(FaultSettings(), 0.0, permanent_possible=True) is Fault.NONE


def test_earlier_bands_win_when_rates_add_up_past_one() -> None:
    both = FaultSettings.model_validate({"transientRate": 1, "permanentRate": 1})
    assert pick_fault(both, 0.9999, permanent_possible=True) is Fault.TRANSIENT


def test_one_draw_per_call_whatever_the_fault() -> None:
    """Calls without faults use up draws too, so a seed fixes the faults of the nth call."""
    injector = FaultInjector(seed=5)
    reference = random.Random(5)
    for _ in range(50):
        draw = reference.random()
        assert injector.draw(SETTINGS, permanent_possible=True) is pick_fault(
            SETTINGS, draw, permanent_possible=True
        )
        reference.random()
        assert injector.draw(FaultSettings(), permanent_possible=False) is Fault.NONE


def test_stats_ignore_no_fault() -> None:
    stats = Stats()
    stats.call(FIRST.name)
    stats.fault(FIRST.name, Fault.NONE)
    stats.fault(FIRST.name, Fault.LOST_REPLY)
    assert stats.snapshot()[FIRST.name] == {**NO_CALLS, "calls": 1, "lostReply": 1}


@pytest.mark.parametrize(
    "settings",
    [{"hangRate": 2}, {"hangRate": float("nan")}, {"latencyMs": 3_600_001}, {"latencyMs": "5"}, {"x": 1}],
)
def test_fault_settings_refuse_bad_values(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FaultSettings.model_validate(settings)


def test_ledger_applies_and_compensates_once_and_persists(tmp_path: Path) -> None:
    async def scenario() -> Ledger:
        ledger = Ledger.load(tmp_path)
        assert (await ledger.apply(FIRST.name, "k", "o-1")).changed
        again = await ledger.apply(FIRST.name, "k", "o-2")
        assert not again.changed and again.entry is not None and again.entry.order_id == "o-1"
        assert (await ledger.compensate(FIRST.name, "k")).changed
        assert not (await ledger.compensate(FIRST.name, "k")).changed
        unknown = await ledger.compensate(LAST.name, "nope")
        assert unknown.entry is None and not unknown.changed
        return ledger

    ledger = asyncio.run(scenario())
    ledger.close()

    compensated = {
        "orderId": "o-1",
        "applied": 1,
        "compensated": 1,
        "result": {},
        "carried": {},
        "undoCarried": {},
        "appliedSeq": 1,
        "compensatedSeq": 2,
        "traceIds": [],
    }
    expected = {**empty(), FIRST.name: {"k": compensated}}
    assert ledger.snapshot() == expected
    reloaded = Ledger.load(tmp_path)
    reloaded.close()
    assert reloaded.snapshot() == expected
    # The start compacted the two changes into the snapshot.
    snapshot = json.loads((tmp_path / LEDGER_FILE_NAME).read_text())
    assert (snapshot["version"], snapshot["sequence"]) == (4, 2)
    assert (tmp_path / JOURNAL_FILE_NAME).read_bytes() == b""


BAD_ENTRY = {"orderId": "o", "applied": 2, "compensated": 0}
GOOD_ENTRY = {"orderId": "o", "applied": 1, "compensated": 0}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "[]",
        '{"version": 5, "services": {}}',
        json.dumps({"version": 1, "services": {UNDECLARED: {}}}),
        json.dumps({"version": 1, "services": {LAST.name: {"k": BAD_ENTRY}}}),
        '{"version": 2, "sequence": -1, "services": {}}',
        json.dumps({"version": 3, "services": {LAST.name: {"k": {**GOOD_ENTRY, "result": []}}}}),
        json.dumps({"version": 3, "services": {LAST.name: {"k": {**GOOD_ENTRY, "appliedSeq": 0}}}}),
        json.dumps({"version": 4, "services": {LAST.name: {"k": {**GOOD_ENTRY, "traceIds": ["not-hex"]}}}}),
    ],
)
def test_a_ledger_file_that_cannot_be_read_is_an_error(tmp_path: Path, content: str) -> None:
    (tmp_path / LEDGER_FILE_NAME).write_text(content)
    with pytest.raises(LedgerError):
        Ledger.load(tmp_path)
    # Left for a human to look at.
    assert (tmp_path / LEDGER_FILE_NAME).read_text() == content


def test_a_ledger_file_with_some_services_fills_in_the_others(tmp_path: Path) -> None:
    entry = {"orderId": "o", "applied": 1, "compensated": 0}
    (tmp_path / LEDGER_FILE_NAME).write_text(
        json.dumps({"version": 1, "services": {LAST.name: {"k": entry}}})
    )
    ledger = Ledger.load(tmp_path)
    ledger.close()
    unknown = {
        "result": None,
        "carried": None,
        "undoCarried": None,
        "appliedSeq": None,
        "compensatedSeq": None,
        "traceIds": None,
    }
    assert ledger.snapshot() == {**empty(), LAST.name: {"k": {**entry, **unknown}}}
