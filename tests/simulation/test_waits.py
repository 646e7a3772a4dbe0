"""Waits in the simulation beyond what the declared catalog exercises: the first fixed seeds on the pinned
catalog ``WAITS`` (tests/simulation/catalogs.py), whose fraud review puts an order past its deadline in
Error (policy ``error``; the declared review's policy, ``compensate``, is what the fixed seeds run). Every
invariant holds, and between them the seeds saw an approval expire into Error, then approved and rejected
from there."""

from __future__ import annotations

from collections import Counter

from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS
from tests.simulation.pool import Job, run_all

SEEDS = (FIXED_SEEDS[0], FIXED_SEEDS[2])  # one run per core (seed 1: finding 15, test_parking.py)


def test_an_approval_past_its_deadline_under_policy_error_waits_in_error_for_a_person() -> None:
    results = run_all(Job(seed, max_orders=FIXED_MAX_ORDERS, catalog="waits") for seed in SEEDS)
    for result in results:
        assert result.ok, result.report()
    totals: Counter[str] = Counter()
    for result in results:
        totals.update({k: v for k, v in result.stats.items() if isinstance(v, int)})
    wanted = (
        "approvals expired into Error",
        "approvals approved from Error",
        "approvals rejected from Error",
        "timers ended by their wake-up",
        "cancelled while waiting",
    )
    print({what: totals[what] for what in wanted})
    assert all(totals[what] > 0 for what in wanted), {what: totals[what] for what in wanted}
    assert totals["approvals expired"] == totals["approvals expired into Error"]  # no other policy here
