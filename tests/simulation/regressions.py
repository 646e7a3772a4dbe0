"""The bugs the simulation found, each with the seed that shows it and a way to put it back, and a hunter for
a new seed when a change makes one miss its bug (seeds drift: docs/simulation.md).

    .venv/bin/python -m tests.simulation.regressions                 # which regressions there are
    .venv/bin/python -m tests.simulation.regressions lost-resume     # hunt from seed 0 for ten minutes
    .venv/bin/python -m tests.simulation.regressions lost-resume --start 200 --seconds 1800

A seed is found when, with the bug put back, the run breaks with the bug's symptom, and the same seed passes
with the bug fixed. Put it in ``REGRESSIONS`` and in the docs' table of findings. Each runs on the catalog its
finding was found on (``tests/simulation/catalogs.py``), straight to the broker.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from engine import machine, transitions
from engine.decisions import Decision
from engine.machine import Operation
from engine.messages import StatusEvent
from engine.state import ProcessState, TaskRecord
from engine.supervisor import Supervisor
from engine.transitions import Context
from simulation.run import Result, run
from tests.simulation.catalogs import PINNED
from tests.simulation.moves import replace
from tests.simulation.store_bugs import take_out

# Puts a bug back (through the monkeypatch, undone when it ends).
PutBack = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Regression:
    """One bug the simulation found (its finding in docs/simulation.md), its seed, and how to put it back."""

    name: str
    finding: int
    seed: int
    symptom: str  # what a violation says when the bug is back
    put_back: PutBack
    catalog: str = "engine-only"  # the pinned catalog it was found on (tests/simulation/catalogs.py)

    def run(self, seed: int | None = None) -> Result:
        """The seed (its own by default) on the regression's catalog, straight to the broker."""
        return run_as_found(self.seed if seed is None else seed, self.catalog)

    def shown_by(self, result: Result) -> bool:
        """Whether a run broke with this bug's symptom."""
        return any(self.symptom in what for _, what in result.violations)


def run_as_found(seed: int, catalog: str = "engine-only") -> Result:
    """A seed as the findings were: on their pinned catalog, the processes sending straight to the broker,
    each submission kicking the Scheduler."""
    workflows, services = PINNED[catalog]
    return run(seed, servicebus=False, catalog=workflows, services=services, submit_as_app=False)


def _store_fixes_off(*fixes: str) -> PutBack:
    def put_back(monkeypatch: pytest.MonkeyPatch) -> None:
        take_out(monkeypatch, *fixes)

    return put_back


def _no_kick_of_a_lost_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    without = tuple(
        r
        for r in machine.TABLE
        if not (r.operation is Operation.KICK and r.source is ProcessState.COMPENSATING)
    )
    monkeypatch.setattr(machine, "TABLE", without)


def _undo_a_skipped_step_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def undo_at_once(record: TaskRecord, ctx: Context, index: int, at: datetime) -> Decision:
        return transitions.dispatch._dispatch(record, ctx, index, compensating=True)

    replace(monkeypatch, transitions.compensation, "_undo_later", undo_at_once)


def _no_alert_raised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    async def forget(self: Supervisor, record: TaskRecord) -> bool:
        return True

    monkeypatch.setattr(Supervisor, "_raise_alert", forget)


def _grace_only_for_a_deadline_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    def settled(complete_by: datetime, ctx: Context) -> datetime:
        ahead = complete_by > ctx.now
        return complete_by + timedelta(seconds=ctx.settings.cancel_grace_seconds) if ahead else complete_by

    replace(monkeypatch, transitions.context, "settled", settled)


def _left_out_entries_say_the_state_then(monkeypatch: pytest.MonkeyPatch) -> None:
    def dispatch_forward(record: TaskRecord, ctx: Context) -> Decision:
        while True:
            index = next(
                (i for i, s in enumerate(record.steps) if s.status not in transitions.context._DONE), None
            )
            if index is None:
                return transitions.endings._finish(record, ctx, ProcessState.PROCESSED, StatusEvent.PROCESSED)
            condition = ctx.steps[index].when
            if condition is None or condition.holds(transitions.document(record, index - 1)):
                return transitions.dispatch._dispatch(record, ctx, index, compensating=False)
            # The entry keeps the state the task had while the step was left out, not the save's change.
            transitions.dispatch._leave_out(record, ctx, index, f"condition not met: {condition.describe()}")

    replace(monkeypatch, transitions.forward, "_dispatch_forward", dispatch_forward)


REGRESSIONS = (
    Regression("lost-resume", 1, 193, "the policy needs", _no_kick_of_a_lost_resume),
    Regression(
        "keep-watch-of-live-task",
        2,
        183,
        "a finished order was never moved to the history",
        # Fix 5 also prevents it, unless the re-putting process dies first: both off.
        _store_fixes_off("keep_watch_of_live_task", "rewatch_new_task"),
    ),
    Regression(
        "history-first",
        3,
        372,
        "both live and in the history",
        # Each of finding 6's fixes also covers it: all three off.
        _store_fixes_off("history_first", "history_also_first", "take_back_leftover"),
    ),
    Regression("archive-if-unchanged", 4, 86, "the tally says", _store_fixes_off("archive_if_unchanged")),
    Regression(
        "rewatch-new-task",
        5,
        48,
        "a finished order was never moved to the history",
        _store_fixes_off("rewatch_new_task"),
    ),
    Regression(
        "take-back-leftover",
        6,
        182123520,
        "the order was started 2 times",
        _store_fixes_off("take_back_leftover", "history_also_first"),
    ),
    Regression(
        "history-also-first",
        6,
        182123642,
        "the order was started 2 times",
        _store_fixes_off("history_also_first"),
    ),
    Regression(
        "undo-of-a-skipped-step-waits", 7, 456930709, "Compensated, but", _undo_a_skipped_step_at_once
    ),
    Regression("lost-alert-raised-again", 8, 51, "no alert was raised", _no_alert_raised_again),
    Regression(
        "cancel-waits-after-a-deadline-just-passed",
        9,
        23090331,
        "Compensated, but",
        _grace_only_for_a_deadline_ahead,
    ),
    Regression(
        "left-out-entry-says-its-change",
        11,
        4,
        "audit entry left out says",
        _left_out_entries_say_the_state_then,
        catalog="constructs",
    ),
)


def shows(regression: Regression, seed: int) -> bool:
    """Whether the seed, with the bug put back, breaks with the bug's symptom."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        regression.put_back(monkeypatch)
        return regression.shown_by(regression.run(seed))


def main(argv: list[str] | None = None) -> int:
    by_name = {r.name: r for r in REGRESSIONS}
    parser = argparse.ArgumentParser(prog="python -m tests.simulation.regressions", description=__doc__)
    parser.add_argument("name", nargs="?", choices=sorted(by_name), help="the regression to hunt a seed for")
    parser.add_argument("--start", type=int, default=0, help="the first seed to try")
    parser.add_argument("--seconds", type=float, default=600.0, help="give up after this long")
    args = parser.parse_args(argv)
    if args.name is None:
        for r in REGRESSIONS:
            print(f"{r.name:30s} finding {r.finding}, seed {r.seed}: {r.symptom!r}")
        return 0
    regression = by_name[args.name]
    started, seed = time.perf_counter(), args.start
    while time.perf_counter() - started < args.seconds:
        if shows(regression, seed) and regression.run(seed).ok:
            print(f"seed {seed} shows {regression.name} with the bug put back and passes without it")
            return 0
        seed += 1
    print(f"no seed from {args.start} to {seed - 1} shows {regression.name}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
