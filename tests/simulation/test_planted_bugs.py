"""Each deliberately planted engine bug (tests/simulation/planted.py) is caught by the fixed seeds that make
test runs, on the pinned catalog it was found on (tests/simulation/catalogs.py), by the invariant about its
consequence (its first violation says so; the run ends there), and the seed that caught it passes once the
bug is taken out again (on the declared catalog, test_fixed_seeds.py checks that). The fixed seeds that fail
without any planted bug (an open finding of parked orders, tests/simulation/parking_findings.py) are passed
over. The planted bugs of groups run in
tests/simulation/test_groups.py, on the seeds it names."""

from __future__ import annotations

import pytest

from simulation.run import Result
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS
from tests.simulation.parking_findings import FAILING
from tests.simulation.planted import PLANTS
from tests.simulation.pool import Job, run_all, run_in_order


def _first_failure(bug: str) -> tuple[int, Result] | None:
    """The first fixed seed that fails with ``bug`` planted (seeds run on every core, in order)."""
    catalog = PLANTS[bug].catalog
    jobs = (
        Job(seed, max_orders=FIXED_MAX_ORDERS, bug=("plant", bug), catalog=catalog, first_violation=True)
        for seed in FIXED_SEEDS
        if seed not in FAILING.get(catalog, frozenset())
    )
    for result in run_in_order(jobs):
        if not result.ok:
            return result.seed, result
    return None


@pytest.mark.parametrize("bug", [name for name, plant in PLANTS.items() if plant.catalog != "groups"])
def test_the_fixed_seeds_catch_a_planted_bug(bug: str) -> None:
    plant = PLANTS[bug]
    caught = _first_failure(bug)
    assert caught is not None, f"no fixed seed caught: {bug}"
    seed, result = caught
    first = result.violations[0][1]
    print(f"{bug}: caught by seed {seed}: {first}")
    assert plant.breaks in first, f"seed {seed} caught {bug} by another invariant first: {first}"
    if plant.catalog is None:
        return  # a fixed seed on the declared catalog: test_fixed_seeds.py holds it to every invariant
    [clean] = run_all([Job(seed, max_orders=FIXED_MAX_ORDERS, catalog=plant.catalog)])
    assert clean.ok, clean.report()
