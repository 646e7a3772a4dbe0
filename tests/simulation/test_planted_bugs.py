"""Each deliberately planted engine bug (tests/simulation/planted.py) is caught by the fixed seeds that make
test runs, on the pinned catalog it was found on (tests/simulation/catalogs.py), by the invariant about its
consequence (its first violation says so; the run ends there), and the seed that caught it passes once the
bug is taken out again (on the declared catalog, test_fixed_seeds.py checks that). Each plant names the
fixed seed that catches it first, and that seed runs alone; a plant that drifted off its seed is searched
for over the fixed seeds in order, as before seeds were named, and the test says which seed to name. The
fixed seeds that fail without any planted bug (an open finding of parked orders,
tests/simulation/parking_findings.py) are passed over. The planted bugs of groups run in
tests/simulation/test_groups.py, on the seeds it names."""

from __future__ import annotations

import warnings

import pytest

from simulation.run import Result
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS
from tests.simulation.parking_findings import FAILING
from tests.simulation.planted import PLANTS
from tests.simulation.pool import Job, run_all, run_in_order

BUGS = [name for name, plant in PLANTS.items() if plant.catalog != "groups"]


def _job(bug: str, seed: int) -> Job:
    catalog = PLANTS[bug].catalog
    return Job(seed, max_orders=FIXED_MAX_ORDERS, bug=("plant", bug), catalog=catalog, first_violation=True)


@pytest.fixture(scope="module")
def named_runs() -> dict[str, Result]:
    """Each plant on the seed it names, all at once on every core."""
    return dict(zip(BUGS, run_all(_job(bug, PLANTS[bug].seed) for bug in BUGS), strict=True))


@pytest.fixture(scope="module")
def clean_runs() -> dict[tuple[str, int], Result]:
    """Each pinned catalog's named seeds without any bug (the declared catalog's: test_fixed_seeds.py)."""
    keys = sorted({(p.catalog, p.seed) for b in BUGS if (p := PLANTS[b]).catalog is not None})
    jobs = (Job(seed, max_orders=FIXED_MAX_ORDERS, catalog=catalog) for catalog, seed in keys)
    return dict(zip(keys, run_all(jobs), strict=True))


def _first_failure(bug: str) -> Result | None:
    """The first fixed seed's run that fails with ``bug`` planted (seeds run on every core, in order)."""
    catalog = PLANTS[bug].catalog
    seeds = (seed for seed in FIXED_SEEDS if seed not in FAILING.get(catalog, frozenset()))
    return next((result for result in run_in_order(_job(bug, seed) for seed in seeds) if not result.ok), None)


def test_every_plant_names_a_fixed_seed_that_passes_without_findings() -> None:
    named = {bug: PLANTS[bug].seed for bug in BUGS}
    assert {b: s for b, s in named.items() if s not in FIXED_SEEDS} == {}
    assert {b: s for b, s in named.items() if s in FAILING.get(PLANTS[b].catalog, frozenset())} == {}


@pytest.mark.parametrize("bug", BUGS)
def test_the_fixed_seeds_catch_a_planted_bug(
    bug: str, named_runs: dict[str, Result], clean_runs: dict[tuple[str, int], Result]
) -> None:
    plant = PLANTS[bug]
    result = named_runs[bug]
    if result.ok:
        searched = _first_failure(bug)
        assert searched is not None, f"no fixed seed caught: {bug}"
        result = searched
        drifted = f"{bug!r} drifted: seed {result.seed} catches it, not {plant.seed}; name it in planted.py"
        warnings.warn(drifted, stacklevel=1)
    first = result.violations[0][1]
    print(f"{bug}: caught by seed {result.seed}: {first}")
    assert plant.breaks in first, f"seed {result.seed} caught {bug} by another invariant first: {first}"
    if plant.catalog is None:
        return  # a fixed seed on the declared catalog: test_fixed_seeds.py holds it to every invariant
    clean = clean_runs.get((plant.catalog, result.seed))
    if clean is None:  # a drifted plant's seed
        [clean] = run_all([Job(result.seed, max_orders=FIXED_MAX_ORDERS, catalog=plant.catalog)])
    assert clean.ok, clean.report()
