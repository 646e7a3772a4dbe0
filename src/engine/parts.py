"""What the Scheduler, the Supervisor and the task service are built from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .backfill import Backfills
from .breaker import BreakerStore
from .clock import Clock
from .formats import Formats
from .ports import MessageSender, StateStore
from .settings import EngineSettings
from .state import TaskRecord
from .transitions import Context, random_id
from .workflow import WorkflowCatalog


@dataclass(frozen=True)
class EngineParts:
    """The deployed workflows wired to a state store, a message sender, a clock and the timing knobs;
    and, when the agents' circuit breakers are shared, their store (the Supervisor holds work for an
    open breaker)."""

    catalog: WorkflowCatalog
    store: StateStore
    sender: MessageSender
    clock: Clock
    settings: EngineSettings
    breakers: BreakerStore | None = None
    # Where the unique part of message ids comes from (a seeded source makes a simulated run reproducible).
    new_id: Callable[[], str] = random_id
    # The record format written now (engine.formats): the previous release's until the switch.
    formats: Formats = field(default_factory=Formats)
    # What this release adds to orders stored before it, and which answers may miss orders meanwhile.
    backfills: Backfills = field(default_factory=Backfills)

    def context(self, instance_id: str = "", record: TaskRecord | None = None) -> Context:
        """What a transition needs, as of now on this engine's clock: with a record, the definition of
        the workflow version it runs (None when that version is not deployed)."""
        workflow = None
        if record is not None:
            workflow = self.catalog.find(record.state.workflow, record.state.workflow_version)
        now = self.clock.now()
        return Context(workflow, self.settings, now, instance_id, self.new_id, seals=self.formats.seals)
