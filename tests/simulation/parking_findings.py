"""What the simulation found in parked orders (docs/simulation.md, "What it found", findings 15 to 18), all
fixed in the product: ``FAILING`` lists the fixed seeds that fail on each catalog because of a finding still
open (``test_fixed_seeds.py`` marks them as strict expected failures, ``test_planted_bugs.py`` passes over
them): none now. Seeds 18, 38, 49, 50, 54, 58, 65, 66, 69, 71, 92 and 97 (declared catalog), 1, 33, 38, 49,
50 and 54 (``WAITS``) and 1 and 9 (``CALLBACKS``) showed them.

Finding 18: a slow sweep judged whether to park by the time it started, so it parked a wait that had
ended by then, and the order waited parked past its deadline; the Supervisor now judges by the clock's time.

Finding 15 (the race described below): the order is lost ("an order in neither place"). Finding 16: a
return that loses its race (its insert refused, another return brought the order back first) has put the
watch entry at its own save's CompleteBy, which may be later than the live task's: the Supervisor comes late
("past its CompleteBy, and the sweep ... without recovering it"). Finding 17: a park that writes over a
stale parked copy of the same task (left by a return that died before its marker) leaves the waiting tally
unchanged, though the stale copy waited for another kind ("the waiting tally says").

The product's mark is a merge conditional on the ETag the Supervisor loaded, so of two Supervisors that
loaded the task before either marked it only one goes on. A Supervisor that loads the task after another
marked it (the watch entry is deleted only at the end of a park) loads the marked record, with its new ETag,
and its own mark succeeds too. Both then park it: the first to write the parked copy creates it, the other
writes over it ("a parked copy found while holding the mark is never the task"), the one whose mark is the
latest deletes the live records, and the other, whose delete is refused, replaces "its" copy by the marker of
a task back in the live records: the order is in neither place, lost.

The fix reads the state record before marking it and refuses a record already marked (another Supervisor is
parking it, or died doing so: the task's next save, which replaces the record, clears the mark): one more
point read per park.
"""

from __future__ import annotations

# The fixed seeds (FIXED_SEEDS, FIXED_MAX_ORDERS) that fail today, by pinned catalog (None: the declared one),
# each by an open finding: none since findings 15 to 18 were fixed (2026-11-27).
FAILING: dict[str | None, frozenset[int]] = {
    None: frozenset(),
    "waits": frozenset(),
    "callbacks": frozenset(),
}
