"""The fixed seeds (src/simulation/seeds.py): every invariant holds on each (docs/simulation.md)."""

from __future__ import annotations

import pytest

from simulation.run import run
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_every_invariant_holds(seed: int) -> None:
    result = run(seed, max_orders=FIXED_MAX_ORDERS)
    assert result.ok, result.report()


@pytest.mark.xfail(
    reason="two runs of one seed in one process end with different digests (same statistics), on Python "
    "3.11 and 3.13: some iteration order or id still escapes the seed; to be found",
    strict=False,
)
def test_a_seed_reproduces_its_run_exactly() -> None:
    first, second = run(11, orders=150), run(11, orders=150)
    assert first.digest == second.digest
    assert first.violations == second.violations
    assert first.stats == second.stats
    assert run(12, orders=150).digest != first.digest
