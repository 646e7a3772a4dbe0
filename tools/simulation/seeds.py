"""The seeds ``make test`` runs (and ``make simulate`` without SEED); those that found bugs are in
``tests/simulation/regressions.py``.

A seed reproduces a run of this version of the simulation and the engine: a change to either changes what
a seed explores. The regression tests therefore check both that a bug's seed passes and that it still
fails with the bug put back; when a change makes a seed miss its bug, hunt a new one with the bug put back
(``make simulate-hunt BUG=<name>``) and update it in ``tests/simulation/regressions.py``.
"""

from __future__ import annotations

# Every seed of this range, each with at most FIXED_MAX_ORDERS orders (a seed draws 200 to 1,500).
FIXED_SEEDS = range(100)
FIXED_MAX_ORDERS = 300

# The share of the fixed seeds ``make test`` also runs with release 1.0.0's engine and adapters on half the
# processes (``python -m simulation --beside 1.0.0``; tests/simulation/test_beside.py).
BESIDE_SEEDS = (0, 1, 2, 3)
