"""What a Waiting order waits for, one kind per module: :mod:`.timer`, :mod:`.approval`, :mod:`.callback`.
Each declares its name (``TaskState.waiting_for``, the API's ``waitingFor``, the listing's and the gauges'
keys) and everything else of its own: how it starts, ends and expires, whether it parks, its rows of the
state machine, what it answers (:class:`.kind.Kind`). A step declares a timer or an approval
(``engine.workflow``: their ``kind`` is one of these names); a step whose service answers later waits for
its callback.

The engine reads a kind here, by name (:func:`of`) or all of them (:data:`KINDS`): the state machine puts
their rows in its table, the moves (``engine.transitions``) start, end and expire a wait as its kind says,
the Supervisor parks the kinds that park and raises what a kind raises when it is overdue, and the task
service answers a refusal in the kind's words. A new kind is a module here, its line in :data:`KINDS` and
in :data:`WaitKind`, and, if a step declares it, its declaration in ``engine.workflow``; an operation of its
own that ends it (a signal's call) is also an ``engine.rules.Operation``, its move in
``engine.transitions.wait_ends`` and, when people call it, a row of ``engine.operator_actions``."""

from __future__ import annotations

from typing import Any, Literal, get_args

from ..rules import Operation, Rule, Slot
from .approval import APPROVAL, APPROVAL_WAIT
from .callback import CALLBACK, CALLBACK_WAIT
from .kind import Kind, MoveContext
from .timer import TIMER, TIMER_WAIT

WaitKind = Literal["approval", "callback", "timer"]
WAIT_KINDS: tuple[WaitKind, ...] = get_args(WaitKind)
# Every kind, in the order their rows go in at each of the table's slots.
KINDS: tuple[Kind[Any], ...] = (TIMER_WAIT, APPROVAL_WAIT, CALLBACK_WAIT)
BY_NAME: dict[str, Kind[Any]] = {kind.name: kind for kind in KINDS}
# The kinds that may wait long, so a waiting order is parked until about its time (engine.supervisor): a
# callback's wait is a step's CompleteBy, short.
PARKED: tuple[str, ...] = tuple(kind.name for kind in KINDS if kind.parks)


def of(name: str | None) -> Kind[Any] | None:
    """The kind of that name (a task's ``waiting_for``, a declared wait's ``kind``); None for none."""
    return BY_NAME.get(name) if name is not None else None


def ended_by(operation: Operation) -> Kind[Any] | None:
    """The kind that ``operation`` ends, if it is one of a kind's own (an approval's approve)."""
    return next((kind for kind in KINDS if operation in kind.ends), None)


def rows(slot: Slot) -> tuple[Rule, ...]:
    """The kinds' rows of the state machine that go in at ``slot``, kind by kind."""
    return tuple(rule for kind in KINDS for at, rule in kind.rows if at is slot)


__all__ = [
    "APPROVAL",
    "APPROVAL_WAIT",
    "BY_NAME",
    "CALLBACK",
    "CALLBACK_WAIT",
    "KINDS",
    "PARKED",
    "TIMER",
    "TIMER_WAIT",
    "WAIT_KINDS",
    "Kind",
    "MoveContext",
    "WaitKind",
    "ended_by",
    "of",
    "rows",
]
