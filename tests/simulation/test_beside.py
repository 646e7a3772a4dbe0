"""Release 1.0.0's engine and adapters beside this release's in one simulated run (simulation.beside,
requirement 8 of issue 53): on a share of the fixed seeds (``BESIDE_SEEDS``), half the processes run 1.0.0's
code, imported under another name (simulation.previous), on the same tables and broker; every invariant
holds, and each release's processes did their share of the work, read what the other sent among it.

A clone whose history lacks the release's commit (a shallow one) skips these, naming why."""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from engine.formats import AFTER_SWITCH
from simulation import actors, previous
from simulation.beside import THIS
from simulation.run import Result, Simulation, run
from simulation.seeds import BESIDE_SEEDS, FIXED_MAX_ORDERS
from tests.simulation.pool import Job, run_all

BESIDE = "1.0.0"
# What each release's processes must have done on every seed, and over the seeds (the rarer work).
EVERY_SEED = ("commands", "replies", "agent requests", "messages the other release sent")
OVER_THE_SEEDS = ("submissions", "sweeps", "callbacks")


def _release() -> None:
    """Skip where this clone cannot load the release."""
    try:
        previous.load(BESIDE, "engine")
    except previous.ReleaseUnavailable as exc:
        pytest.skip(f"release {BESIDE} is not in this clone's history: {exc}")


@pytest.fixture(scope="module")
def beside_runs() -> dict[int, Result]:
    """The seeds' runs beside 1.0.0, on every core."""
    _release()
    runs = run_all(Job(seed, max_orders=FIXED_MAX_ORDERS, beside=BESIDE) for seed in BESIDE_SEEDS)
    return dict(zip(BESIDE_SEEDS, runs, strict=True))


def _work(result: Result, release: str) -> Counter[str]:
    prefix = f"{release} processes: "
    return Counter({k.removeprefix(prefix): v for k, v in result.stats.items() if k.startswith(prefix)})


@pytest.mark.parametrize("seed", BESIDE_SEEDS)
def test_every_invariant_holds_beside_1_0_0(seed: int, beside_runs: dict[int, Result]) -> None:
    result = beside_runs[seed]
    assert result.ok, result.report()
    for release in (BESIDE, THIS):
        work = _work(result, release)
        assert all(work[what] > 0 for what in EVERY_SEED), (release, dict(work))


def test_both_releases_did_every_kind_of_work(beside_runs: dict[int, Result]) -> None:
    for release in (BESIDE, THIS):
        totals: Counter[str] = Counter()
        for result in beside_runs.values():
            totals.update(_work(result, release))
        assert all(totals[what] > 0 for what in OVER_THE_SEEDS), (release, dict(totals))


def test_half_the_processes_run_the_release_s_own_classes() -> None:
    """The hosts of the release's slots are built of its modules (prefixed names), the others of this
    release's: a beside run that silently ran this release alone fails here."""
    _release()
    sim = Simulation(0, orders=5, beside=BESIDE)
    try:
        assert sim.beside is not None
        prefix = previous.prefix(BESIDE)
        modules = {
            worker.slot: {
                type(worker.host.scheduler).__module__,
                type(worker.host.supervisor).__module__,
                type(worker.host.tasks.parts.store).__module__,
                *(type(agent).__module__ for agent in worker.host.agents.values()),
            }
            for worker in sim.world.workers
        }
        ours = {"engine.scheduler", "engine.supervisor", "adapters.table_store", "engine.agent"}
        for slot, found in modules.items():
            assert found == ({f"{prefix}.{m}" for m in ours} if slot in sim.beside.slots else ours), slot
        assert 0 < len(sim.beside.slots) < len(modules)
    finally:
        sim.loop.close()


def test_the_release_s_imports_of_its_own_packages_are_prefixed() -> None:
    source = "import engine\nimport engine.x\nimport engine.y as y\nimport json\nfrom orders.a import b\n"
    rewritten = previous._Rewriter("release_9").visit(ast.parse(source))
    assert ast.unparse(ast.fix_missing_locations(rewritten)).splitlines() == [
        "import release_9.engine as engine",
        "import release_9.engine.x",
        "from release_9 import engine",
        "import release_9.engine.y as y",
        "import json",
        "from release_9.orders.a import b",
    ]


def test_a_seed_beside_1_0_0_reproduces_its_run_exactly() -> None:
    """Twice in one process: the release's modules, loaded once, keep nothing of one run for the next."""
    _release()
    first, second = run(5, orders=100, beside=BESIDE), run(5, orders=100, beside=BESIDE)
    assert first.digest == second.digest
    assert first.stats == second.stats


def test_without_the_hold_the_release_before_is_sent_sealed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch flipped under 1.0.0's processes (docs/upgrading.md, "Rolling back"): this release writes
    format 2 and seals the payment token, which 1.0.0 would send to the payment service as it is. The run
    sees both, so a beside run that passes has held to the formats 1.0.0 reads."""
    _release()
    monkeypatch.setattr(actors, "BEFORE_SWITCH", AFTER_SWITCH)
    result = run(0, orders=100, beside=BESIDE)
    found = [what for _, what in result.violations]
    assert any("sealed to its service" in what for what in found), result.report()
    assert any("written in format 2" in what for what in found), result.report()


def test_a_release_missing_from_the_history_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a shallow clone gets: the reason, naming the commit (the tests above skip with it)."""
    monkeypatch.setitem(previous.RELEASES, "0.0.1", "0" * 40)
    with pytest.raises(previous.ReleaseUnavailable, match=r"0\.0\.1 \(000000000000\)"):
        previous.load("0.0.1", "engine")
