"""Updates of a running order in the deterministic simulation, on the pinned catalog whose delivery address
may change until the shipment (tests/simulation/catalogs.py, ``updates``): customers correct orders while
they run, racing the step that reads the field, under every fault a seed draws; the oracle holds every call
from that step on to the input as the last update left it (tools/simulation/oracle/ledger.py). The plant
that lets an update through after that step started is caught (tests/simulation/test_planted_bugs.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from simulation.run import Result
from simulation.seeds import FIXED_MAX_ORDERS
from tests.simulation.pool import Job, run_all

SEEDS = (0, 1)


@pytest.fixture(scope="module")
def update_runs() -> list[Result]:
    return run_all(Job(seed, max_orders=FIXED_MAX_ORDERS, catalog="updates") for seed in SEEDS)


def test_updates_racing_the_step_that_reads_them_keep_every_invariant(update_runs: list[Result]) -> None:
    totals: Counter[str] = Counter()
    for result in update_runs:
        assert result.ok, result.report()
        totals.update({k: v for k, v in result.stats.items() if isinstance(v, int)})
    wanted = (
        "operator update done",  # before the shipment
        "operator update refused",  # the shipment had started (or the order ended)
        "updates saved",
        "calls from an update's fence on",
    )
    print({what: totals[what] for what in wanted})
    assert all(totals[what] > 0 for what in wanted), {what: totals[what] for what in wanted}
