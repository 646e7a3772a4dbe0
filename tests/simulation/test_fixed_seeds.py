"""The fixed seeds (src/simulation/seeds.py): every invariant holds on each (docs/simulation.md)."""

from __future__ import annotations

import pytest

from adapters.table_store import TableStateStore
from engine.state import TaskRecord
from simulation.run import Result, run
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS
from tests.simulation.pool import Job, run_all


@pytest.fixture(scope="module")
def fixed_runs() -> dict[int, Result]:
    """Every fixed seed's run, on every core."""
    runs = run_all(Job(seed, max_orders=FIXED_MAX_ORDERS) for seed in FIXED_SEEDS)
    return dict(zip(FIXED_SEEDS, runs, strict=True))


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_every_invariant_holds(seed: int, fixed_runs: dict[int, Result]) -> None:
    result = fixed_runs[seed]
    assert result.seed == seed
    assert result.ok, result.report()


def test_a_seed_reproduces_its_run_exactly() -> None:
    """Twice in one process (nothing left over from the first run may matter), to the last ETag."""
    first, second = run(11, orders=150), run(11, orders=150)
    assert first.digest == second.digest
    assert first.violations == second.violations
    assert first.stats == second.stats
    assert run(12, orders=150).digest != first.digest


def test_the_simulation_makes_the_adapter_s_own_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state store is the adapter itself: one more request of it (a load that also reads the history)
    changes the run, and so its digest."""
    before = run(11, orders=150)
    load_live = TableStateStore._load_live

    async def load_with_a_look_at_the_history(self: TableStateStore, order_id: str) -> TaskRecord | None:
        await self._read_archive(order_id)
        return await load_live(self, order_id)

    monkeypatch.setattr(TableStateStore, "_load_live", load_with_a_look_at_the_history)
    after = run(11, orders=150)
    assert after.ok, after.report()
    assert after.digest != before.digest
