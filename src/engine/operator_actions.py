"""The actions people take on a running order, declared once: each one's name (its audit entry's action,
the last segment of its route), its row in the state machine, whether it acts on a named step, what it is
given, and the move it makes. ``TaskService.act`` carries any of them out (load, check the version the
caller read, move, audit, save, send); the API's routes, the simulation's operators and the console read
this table. A new action is a row here and its move in ``engine.transitions``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import transitions
from .decisions import Decision
from .machine import Operation
from .state import TaskRecord
from .transitions import Context


@dataclass(frozen=True)
class Given:
    """What an action is given beyond the order: the step it names (its index in the order's steps), a
    number of seconds, the caller's note, the input fields it changes."""

    step: int = 0
    seconds: float = 0.0
    note: str = ""
    changes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OperatorAction:
    """One action: ``move`` changes the record (or refuses) given what the caller sent."""

    name: str
    operation: Operation
    on_step: bool
    move: Callable[[TaskRecord, Context, Given], Decision]
    takes_seconds: bool = False  # the caller says how many seconds
    note_required: bool = False  # the caller must say why
    takes_input: bool = False  # the caller sends input fields and their new values
    # The audit entry's detail, from what the action was given and the order's input before the move.
    detail: Callable[[Given, Mapping[str, Any]], str | None] = lambda given, before: None


RESUBMIT = OperatorAction("resubmit", Operation.RESUBMIT, False, lambda r, c, g: transitions.resubmit(r, c))
CANCEL = OperatorAction("cancel", Operation.CANCEL, False, lambda r, c, g: transitions.cancel(r, c))
RETRY = OperatorAction(
    "retry", Operation.RETRY_STEP, True, lambda r, c, g: transitions.retry_step(r, c, g.step)
)
EXTEND = OperatorAction(
    "extend",
    Operation.EXTEND_STEP,
    True,
    lambda r, c, g: transitions.extend_step(r, c, g.step, g.seconds),
    takes_seconds=True,
    detail=lambda g, before: f"CompleteBy pushed by {g.seconds:g} s",
)
SKIP = OperatorAction(
    "skip",
    Operation.SKIP_STEP,
    True,
    lambda r, c, g: transitions.skip_step(r, c, g.step, g.note),
    note_required=True,
)
APPROVE = OperatorAction(
    "approve", Operation.APPROVE, True, lambda r, c, g: transitions.approve(r, c, g.step)
)
REJECT = OperatorAction(
    "reject", Operation.REJECT, True, lambda r, c, g: transitions.reject(r, c, g.step, g.note)
)


def _before_and_after(given: Given, before: Mapping[str, Any]) -> str:
    """Each changed field's value before and after, as JSON (cut to the audit entry's 2,000 characters)."""
    changed = {
        name: {"before": before.get(name), "after": value} for name, value in sorted(given.changes.items())
    }
    text = json.dumps(changed, separators=(",", ":"), default=str)
    return text if len(text) <= 2000 else text[:1999] + "\u2026"


UPDATE = OperatorAction(
    "update",
    Operation.UPDATE_INPUT,
    False,
    lambda r, c, g: transitions.update_input(r, c, g.changes),
    takes_input=True,
    detail=_before_and_after,
)

ACTIONS: tuple[OperatorAction, ...] = (RESUBMIT, CANCEL, RETRY, EXTEND, SKIP, APPROVE, REJECT, UPDATE)
BY_NAME = {action.name: action for action in ACTIONS}
