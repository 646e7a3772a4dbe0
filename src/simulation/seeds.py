"""The seeds ``make test`` runs (and ``make simulate`` without SEED), and the seeds that found bugs.

A seed reproduces a run of this version of the simulation and the engine: a change to either changes what
a seed explores. The regression tests therefore check both that a bug's seed passes and that it still
fails with the bug put back; when a change makes a seed miss its bug, hunt a new one with the bug put back
(``python -m simulation --seeds 0-999`` under the same change) and update it here.
"""

from __future__ import annotations

# Every seed of this range, each with at most FIXED_MAX_ORDERS orders (a seed draws 200 to 1,500).
FIXED_SEEDS = range(100)
FIXED_MAX_ORDERS = 300
