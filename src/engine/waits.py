"""What a Waiting order waits for, declared once: the kinds' names (``TaskState.waiting_for``, the API's
``waitingFor``, the listing's and the gauges' keys, the state machine's guards) and what each kind does
that the others do not. A step declares a timer or an approval (``engine.workflow``: their ``kind`` is
one of these); a step whose service answers later waits for its callback.

How each kind starts, ends and expires is the state machine's (``engine.machine``, rows guarded by
``wait=``) and its moves' (``engine.transitions``); what parks, here."""

from __future__ import annotations

from typing import Final, Literal, get_args

WaitKind = Literal["approval", "callback", "timer"]
APPROVAL: Final = "approval"  # a person approves or rejects, by a deadline
CALLBACK: Final = "callback"  # the step's service took the call and answers later, at the callback route
TIMER: Final = "timer"  # a time comes: a wake-up message the Scheduler receives
WAIT_KINDS: tuple[WaitKind, ...] = get_args(WaitKind)
# The kinds that may wait long, so a waiting order is parked until about its time (engine.supervisor): a
# callback's wait is a step's CompleteBy, short.
PARKED: tuple[WaitKind, ...] = (TIMER, APPROVAL)
