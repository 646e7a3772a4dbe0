"""The fixed seeds (src/simulation/seeds.py): every invariant holds on each (docs/simulation.md)."""

from __future__ import annotations

import pytest

from simulation.run import run
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_every_invariant_holds(seed: int) -> None:
    result = run(seed, max_orders=FIXED_MAX_ORDERS)
    assert result.ok, result.report()


def test_a_seed_reproduces_its_run_exactly() -> None:
    """Twice in one process (nothing left over from the first run may matter), to the last ETag."""
    first, second = run(11, orders=150), run(11, orders=150)
    assert first.digest == second.digest
    assert first.violations == second.violations
    assert first.stats == second.stats
    assert run(12, orders=150).digest != first.digest
