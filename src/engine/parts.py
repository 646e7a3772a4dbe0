"""What the Scheduler, the Supervisor and the task service are built from."""

from __future__ import annotations

from dataclasses import dataclass

from .clock import Clock
from .ports import MessageSender, StateStore
from .transitions import EngineSettings
from .workflow import WorkflowDefinition


@dataclass(frozen=True)
class EngineParts:
    """One workflow wired to a state store, a message sender, a clock and the timing knobs."""

    workflow: WorkflowDefinition
    store: StateStore
    sender: MessageSender
    clock: Clock
    settings: EngineSettings
