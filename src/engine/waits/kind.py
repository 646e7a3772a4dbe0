"""What a kind of wait declares (:class:`Kind`): everything the rest of the engine asks about a wait of that
kind, so that none of it asks which kind a wait is. Each kind declares one, in its own module
(:mod:`.timer`, :mod:`.approval`, :mod:`.callback`):

- its name (``TaskState.waiting_for``, the API's ``waitingFor``), what it is in words, and whether a wait
  of it parks (it may wait long: the Supervisor moves it out of the live records until about its time);
- how it starts: when it ends, timed from now (:meth:`Kind.until`), its CompleteBy after that
  (:meth:`Kind.complete_by`), and what it sends (:meth:`Kind.sends`: a timer's wake-up);
- how it expires, when the Supervisor finds it past its CompleteBy (:attr:`Kind.expires`: the operation
  the table allows it then), and what the Supervisor raises then (:attr:`Kind.overdue`);
- how it ends: the operations of its own that end it (:attr:`Kind.ends`: a timer's wake-up, a person's
  decision; their moves are ``engine.transitions``'), or none (a callback ends as a reply does);
- its rows of the state machine, each at its place in the table (:attr:`Kind.rows`);
- what it answers when its move refuses an operation the table allows (:meth:`Kind.refusal`).

The kinds sit below the state machine, which collects their rows, and so below the moves
(``engine.transitions``), which carry a wait out by asking its kind: a kind computes and answers, and the
moves change the record.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, Protocol

from ..decisions import Outgoing
from ..rules import Operation, Rule, Slot
from ..settings import EngineSettings
from ..state import StepState, TaskRecord


class MoveContext(Protocol):
    """What a kind reads of the context of the move that asks it (``engine.transitions.Context``)."""

    @property
    def now(self) -> datetime: ...

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def new_id(self) -> Callable[[], str]: ...


class Kind[D]:
    """One kind of wait; ``D`` is how a step declares it (``engine.workflow``'s ``Timer``, ``Approval``), or
    None for a kind no step declares (a service's callback). A kind's module subclasses it once and
    declares the one object the engine reads."""

    name: str  # the task's WaitingFor while it waits so, and the API's waitingFor
    text: str  # the kind in words ("an approval"), as an answer names what an operation needs
    parks: bool  # a wait of it may be long: parked until about its time (engine.lifecycle)
    # What the Supervisor asks the table for when it finds the wait past its CompleteBy (engine.transitions'
    # recovery): REWAKE sends again what the wait sends (nothing failed), DEADLINE applies its declared
    # policy (undo, or Error with an alert), EXPIRE counts it as a step's timeout.
    expires: Operation
    ends: tuple[Operation, ...] = ()  # the operations of its own that end it (allowed on it alone)
    rows: tuple[tuple[Slot, Rule], ...] = ()  # its rows of the state machine, each at its place in the table
    commands: int = 0  # the commands to the Scheduler a wait of it sends when all goes well (engine.costs)
    overdue: str | None = None  # the event the Supervisor raises when it acts on it past its CompleteBy

    def until(self, record: TaskRecord, index: int, wait: D, ctx: MoveContext) -> datetime | None:
        """When the wait of step ``index``, declared ``wait``, ends if it starts now (None: it would not
        wait at all)."""
        raise NotImplementedError

    def complete_by(self, until: datetime, ctx: MoveContext) -> datetime:
        """The task's CompleteBy while it waits until ``until``: by when the Supervisor looks at it."""
        return until

    def sends(
        self, record: TaskRecord, at: datetime, reason: str, new_id: Callable[[], str]
    ) -> tuple[Outgoing, ...]:
        """What the current wait sends for its time ``at`` when it starts, and again when the Supervisor
        finds it lost (REWAKE)."""
        return ()

    def policy(self, wait: D) -> Literal["compensate", "error"]:
        """What the Supervisor does with a wait past its deadline (DEADLINE): undo the order, or put it in
        Error with an alert."""
        return "compensate"

    def refusal(self, operation: Operation, step: StepState) -> str | None:
        """Why ``operation``, which the table allows on this wait of ``step``, was refused all the same (None:
        no reason of this kind's)."""
        return None

    def detail(self, until: datetime | None) -> str:
        """What the status message of a wait that starts says: what it waits for, until when."""
        return f"{self.name} until {until.isoformat() if until else '?'}"
