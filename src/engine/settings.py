"""The engine's timing knobs, and the keys that seal sensitive input. The application fills them from its
own settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .sealing import Keyring


@dataclass(frozen=True)
class EngineSettings:
    """Timing knobs of the engine."""

    step_complete_by_seconds: float = 30.0
    supervisor_max_failures: int = 3
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 60.0
    cancel_grace_seconds: float = 1.0
    # How long after a breaker's openUntil (or trial deadline) the Supervisor looks again at work it held.
    hold_margin_seconds: float = 1.0
    # Waits' durations by the setting a workflow's wait names (engine.workflow.Timer.setting,
    # Approval.setting): a setting absent here leaves the declared duration.
    wait_seconds: Mapping[str, float] = field(default_factory=dict)
    # A task waiting for a timer or an approval whose CompleteBy is more than twice this far off is parked
    # out of the live records by the Supervisor, and brought back about this long before it is due (0:
    # nothing is parked). See engine.supervisor.
    park_horizon_seconds: float = 0.0
    # The keys that seal the input fields a workflow declares sensitive (engine.sealing); None: an order
    # that carries such a value is refused (engine.sealing.KeyMissing), never stored in clear.
    input_keys: Keyring | None = None

    def backoff(self, failure_count: int) -> float:
        """The extended period before a retry: doubles with each failure, bounded."""
        return min(self.backoff_base_seconds * 2 ** max(failure_count - 1, 0), self.backoff_max_seconds)
