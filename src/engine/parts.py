"""What the Scheduler, the Supervisor and the task service are built from."""

from __future__ import annotations

from dataclasses import dataclass

from .clock import Clock
from .ports import BreakerStore, MessageSender, StateStore
from .settings import EngineSettings
from .transitions import Context
from .workflow import WorkflowDefinition


@dataclass(frozen=True)
class EngineParts:
    """One workflow wired to a state store, a message sender, a clock and the timing knobs; and, when the
    agents' circuit breakers are shared, their store (the Supervisor holds work for an open breaker)."""

    workflow: WorkflowDefinition
    store: StateStore
    sender: MessageSender
    clock: Clock
    settings: EngineSettings
    breakers: BreakerStore | None = None

    def context(self, instance_id: str = "") -> Context:
        """What a transition needs, as of now on this engine's clock."""
        return Context(self.workflow, self.settings, self.clock.now(), instance_id)
