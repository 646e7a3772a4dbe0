"""Groups of steps side by side, in the simulation: seeds of the fixed set on the pinned catalog ``GROUPS``
(tests/simulation/catalogs.py: reserve; then together the charge, whose payment may answer later, the
shipment unless every item is digital, and a notice that cannot be unsent; then the confirmation). Every
invariant holds (docs/simulation.md, "Groups"): those of single steps for each step of a group, no step
after a group before all of it has completed, a failed or cancelled group undone after its steps settled
and leaving no applied effect; and between them the seeds saw what groups are for. Each planted bug of
groups (tests/simulation/planted.py) is caught on the seed its plant names, by the invariant about its
consequence, and that seed passes without it (it is one of ``SEEDS``)."""

from __future__ import annotations

from collections import Counter

import pytest

from simulation.run import Result
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS
from tests.simulation.group_findings import SHOWED
from tests.simulation.planted import PLANTS
from tests.simulation.pool import Job, run_all

# The first fixed seeds with faults (1, 3 and 5 are calm: every order Processed), on every core.
SEEDS = tuple(FIXED_SEEDS[i] for i in (0, 2, 4, 6))

# Each planted bug of groups, and the seed of SEEDS that catches it first (by its plant's words).
CAUGHT_BY = {name: plant.seed for name, plant in PLANTS.items() if plant.catalog == "groups"}


@pytest.fixture(scope="module")
def runs() -> dict[int, Result]:
    results = run_all(Job(seed, max_orders=FIXED_MAX_ORDERS, catalog="groups") for seed in SEEDS)
    return dict(zip(SEEDS, results, strict=True))


@pytest.fixture(scope="module")
def planted() -> dict[str, Result]:
    jobs = [
        Job(seed, max_orders=FIXED_MAX_ORDERS, bug=("plant", bug), catalog="groups")
        for bug, seed in CAUGHT_BY.items()
    ]
    return dict(zip(CAUGHT_BY, run_all(jobs), strict=True))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_invariant_holds_with_groups(seed: int, runs: dict[int, Result]) -> None:
    assert runs[seed].ok, runs[seed].report()


def test_the_seeds_exercise_groups(runs: dict[int, Result]) -> None:
    totals: Counter[str] = Counter()
    for result in runs.values():
        totals.update({k: v for k, v in result.stats.items() if isinstance(v, int)})
    wanted = (
        "groups joined",
        "steps left out",  # the shipment of an order of digital goods, inside the group
        "steps of a group waiting for a callback",
        "callbacks taken",
        "result values passed on",  # the confirmation carries the group's tracking number
        "groups undone while they ran",
        "groups let settle before their undo",
        "steps without undo left applied in a Compensated order",
    )
    print({what: totals[what] for what in wanted})
    assert all(totals[what] > 0 for what in wanted), {what: totals[what] for what in wanted}


def test_every_planted_bug_of_groups_names_one_of_the_seeds() -> None:
    assert CAUGHT_BY and {name: seed for name, seed in CAUGHT_BY.items() if seed not in SEEDS} == {}


@pytest.mark.parametrize("bug", list(CAUGHT_BY))
def test_a_planted_bug_of_groups_is_caught(
    bug: str, planted: dict[str, Result], runs: dict[int, Result]
) -> None:
    result = planted[bug]
    assert not result.ok, f"seed {result.seed} did not catch: {bug}"
    first = result.violations[0][1]
    print(f"{bug}: caught by seed {result.seed}: {first}")
    assert PLANTS[bug].breaks in first, f"seed {result.seed} caught {bug} by another invariant first: {first}"
    assert runs[result.seed].ok, runs[result.seed].report()


# The declared catalog's seeds of findings 19 and 20 are fixed seeds: test_fixed_seeds.py runs them.
FINDING_SEEDS = [
    (catalog, seed) for catalog, seeds in SHOWED.items() if catalog is not None for seed in seeds
]
FINDING_21 = 20032


@pytest.fixture(scope="module")
def findings() -> dict[tuple[str | None, int], Result]:
    """The seeds of findings 19 to 21, on every core."""
    jobs = [Job(seed, max_orders=FIXED_MAX_ORDERS, catalog=catalog) for catalog, seed in FINDING_SEEDS]
    jobs.append(Job(FINDING_21, max_orders=400))
    keys = [*FINDING_SEEDS, (None, FINDING_21)]
    return dict(zip(keys, run_all(jobs), strict=True))


@pytest.mark.parametrize(("catalog", "seed"), FINDING_SEEDS)
def test_the_seeds_of_findings_19_and_20_pass(
    catalog: str, seed: int, findings: dict[tuple[str | None, int], Result]
) -> None:
    """The seeds that showed findings 19 and 20 (tests/simulation/group_findings.py) hold every invariant:
    a trial call is carried uncounted, and a step waiting for its callback is counted, never held."""
    result = findings[catalog, seed]
    assert result.ok, result.report()


def test_the_seed_of_finding_21_passes(findings: dict[tuple[str | None, int], Result]) -> None:
    """Seed 20032 (declared catalog), where a slow sweep judged a group's step by a breaker reading older
    than the step's timeout and counted what the open breaker explained (docs/simulation.md, finding 21)."""
    result = findings[None, FINDING_21]
    assert result.ok, result.report()
