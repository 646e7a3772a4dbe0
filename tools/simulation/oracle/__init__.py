"""The invariants, checked while a run goes and once it has settled, against the simulation's own record of
what happened (the services' ledger, the messages the broker carried, the breakers' history, the
processes that died), never against what the engine believes.

During the run, on every committed change of a task's state record:

- it follows the state machine (``engine.machine.TABLE``), and a finished task never changes again;
- a step's attempt numbers never go back;
- a step's outcome was reported by that very attempt: a step is Completed only after its current attempt's
  Agent sent a success (or an operator skipped it, audited in the same transaction), Failed only after
  that attempt's Agent reported a lasting failure, Compensated only after its current undo's Agent
  reported success; an Error for a failed undo only after that undo's Agent reported the failure (a
  callback's outcome is reported by the reply the callback route sends for its dispatch); a step becomes
  Completed once (its outcome and its result are recorded once);
- a step that calls a service waits only for its callback (:meth:`Oracle._callback_awaited`): from
  Running, after its service, which may answer later, answered that very attempt 202, the task Waiting for
  a "callback" until the step's CompleteBy; a cancel ends that wait ("cancelled while waiting"), an
  extend moves it and re-sends nothing;
- Error is entered only as the policy says: by the Scheduler for a failed undo (above), or by the
  Supervisor once the step has had ``SUPERVISOR_MAX_FAILURES`` attempts in its phase since the failures
  were last reset that each outlived their CompleteBy while the service's breaker was closed (or could
  not be read) at some moment between that CompleteBy and the next attempt: time spent held for an
  open breaker never counts (an attempt its service took, 202, counts whatever the breaker);
- every audit entry describes the change it is written with (states before and after);
- a task is created once per id;
- a step is left out only when its condition does not hold on the order's input and the values earlier
  steps' services returned (as the simulation knows them, not as the record says), from Not started, with
  that condition as its reason; a step whose condition does not hold is never dispatched, and a step
  without an undo action never has its undo dispatched;
- a step Completed from its Agent's reply records exactly the values its service returned;
- waits (:meth:`Oracle._wait_started`, :meth:`Oracle._wait_ended`, :meth:`Oracle._passes_waits`): a wait
  starts as the run set it (its duration from the moment the engine decided it, or its input's time) and
  the task says so; its outcome is applied once per attempt and only as its kind allows (a timer by its
  wake-up once its time has come, an approval by an approve, either by a skip; an approval Failed by a
  reject or, under policy compensate, by the Supervisor once its deadline passed; under policy error it
  enters Error then; any wait by a cancel); nothing runs before its timer (a later step is dispatched
  only once every wait before it ended well, a timer not before its time as recorded); a rejected or
  expired approval, or a wait cancelled, never reaches the next step; a finished order has no wait under
  way;
- groups (steps side by side, :meth:`Oracle._passes_groups`, :meth:`Oracle._group_expiries`): each step of a
  group is held to the invariants above on its own (its attempts, its outcome, its result, its Supervisor's
  count; a step of a group waiting for its callback leaves the task Processing); no step after a group is
  dispatched before every step of the group is Completed or Left out (the join); an operator's action on a
  step of a running group shows its effect on that step, the task staying at the group.

At the services, on every call and every effect:

- an undo never lands while a later step of the same order is applied and not undone (a step that cannot
  be undone excepted: it stays applied);
- a step left out by its condition is never called (a call of a step whose condition does not hold is one);
- a result passed on is the one returned: every result value a call carries (the client builds its body
  from the request, as in production) is the value the producing step's service returned, and a call
  carries each value it reads that the engine had when it dispatched it (an undo, its own step's values
  when that step completed from its reply);
- a step that cannot be undone is never applied after an undo of its order landed: a cancel (or a failure)
  waits for it to land or to be unable to land before it undoes the steps before it;
- no call of a step reaches its service before a timer before it ends, or after a wait before it was
  rejected, expired or cancelled;
- an undo waits for the callback: it never reaches a service still deciding, within the budget, the apply
  it answered 202 (:meth:`Oracle.withdrawn`);
- the join holds at the services too (no call of a step after a group before the group joined), and a failed
  or cancelled group lets its steps settle before its undo: no step of a group that can be undone is applied
  after its own undo landed.
- updates are fenced by the step that reads their fields (:meth:`Oracle._fenced`): every call from that
  step on carries the value the input holds, as the last update saved left it, the same on every call (no
  update is saved once that step started).

At the callback route, on every callback it answers (:meth:`Oracle.callback_answered`): a forged one is
refused 401; one its service signed is taken only for the dispatch the order waited for meanwhile, as the
reply of that dispatch with the service's outcome, and refused (409) only when the order did not wait for it
throughout (404: its order is finished and purged).

Parked orders (the history table's changes, :class:`simulation.storage.Storage`): a park or a return is no
change of the order's state (a return is checked as a save from the parked copy's state); an order is never
in neither place (no live state record, no parked copy, unfinished); each shard's waiting tally counts its
parked copies by kind; a parked order whose live records are gone keeps its listing entry and a calendar
entry or a watch entry.

Once the run has settled (faults stopped, every message settled, the Supervisor has swept):

- every order reached a terminal state, within the bound after the faults stopped;
- the ledger: no effect made twice or under a key of no step; a Processed order has every step applied and
  none undone (a skipped step: not undone) except the steps left out by their condition, which are Left
  out in its record and have no effect, and its waits, each ended well; a Compensated order has every
  applied step undone, except the steps that cannot be undone (a failed or cancelled group leaves no
  applied effect); no call was ever made under the key of a
  step left out; nothing after a wait rejected, expired or cancelled was applied (an order cancelled inside
  its cancellation window has no shipment);
- no record outlives its order: no watch entry, no hold on a terminal order, no live record without its
  task (input, steps, listing entry, audit), one listing entry per live task naming its state, history
  tallies that count the history, a ``gone`` entry per tombstone; no parked copy left but a stale one beside
  an order still live (counted), and waiting tallies that count the parked copies;
- the audit trail holds every operator action that was answered as done (and no other), and one "error"
  entry per time the order entered Error;
- every entry into Error raised an ``OrderEnteredError`` alert, unless an operator took the order out of
  Error first (alerting is at least once: a duplicate is counted, not a violation);
- no message is lost: every message of a consumed queue was completed, dead-lettered or (an Agent's
  request past its deadline) expired.

Liveness, what must happen (the bounds are :class:`simulation.liveness.Limits`, from the run's settings):

- the Supervisor's counting is held to the policy the other way too: once a step has had
  ``SUPERVISOR_MAX_FAILURES`` timeouts the policy counts in its phase since its count was last reset (an
  attempt that outlived its CompleteBy, not held, its service's breaker closed from that CompleteBy until
  the Supervisor came), the Supervisor's recovery of it is Error, never another attempt (checked on every
  save, faults or not);
- once the faults stopped, the Supervisor keeps its schedule: a sweep ends normally, and it recovers every
  task in flight whose latest CompleteBy had passed when it started: at most one sweep interval after that
  CompleteBy, plus the scheduling slack (the sweep still running at that tick, and its own run);
- every operator action answered as done had its effect, as ``engine.tasks`` promises it: the save that
  carries its audit entry shows it (an extend moved the step's CompleteBy by what was asked and re-sent the
  request with it; a retry handed the task back unlocked with a fresh CompleteBy, a failure count reset if
  it came out of Error, and the step was dispatched again; a skip completed the step with no result and the
  operator's reason, and handed the task back; a resubmit put an Error order back to Pending, and a
  Scheduler claimed it; a cancel started the undo), its command was sent, and a cancel ended Compensated
  (or in Error, which its answer could not know of: counted as such), unless a later action on the order
  took over;
- once the faults stopped, every order is terminal within its own bound: from then, or from its last action
  saved since, the work left to it under the policy (checked while the run settles, and at its end).

Where each family lives: the shared record of each order and the violations (:mod:`.core`), the state
machine (:mod:`.machine`), waits and callbacks (:mod:`.waits`), groups (:mod:`.groups`), the ledger
(:mod:`.ledger`), parked orders (:mod:`.parking`), traces (:mod:`.traces`), the Supervisor's policy and
schedule (:mod:`.supervisor`), the orders' bounds (:mod:`.bounds`), operator actions (:mod:`.operators`), the
broker and the alerts (:mod:`.messages`). :class:`Oracle` is all of them over one record.
"""

from __future__ import annotations

from .core import (
    CANCELLED_WAITING,
    ENGINE_ENTRIES,
    LEFT_OUT_REASON,
    OPERATOR_NOTE,
    SKIP_REASON,
    TOLERANCE,
    UNDONE_WITH_GROUP,
    Attempt,
    OperatorAct,
    OracleCore,
    OrderTruth,
    StepView,
    WaitTruth,
)
from .ledger import settled_ledger
from .machine import Machine
from .messages import AlertHandler, Messages
from .operators import settled_liveness
from .parking import Parking, settled_parking
from .traces import settled_traces

__all__ = [
    "CANCELLED_WAITING",
    "ENGINE_ENTRIES",
    "LEFT_OUT_REASON",
    "OPERATOR_NOTE",
    "SKIP_REASON",
    "TOLERANCE",
    "UNDONE_WITH_GROUP",
    "AlertHandler",
    "Attempt",
    "OperatorAct",
    "Oracle",
    "OracleCore",
    "OrderTruth",
    "StepView",
    "WaitTruth",
    "settled_ledger",
    "settled_liveness",
    "settled_parking",
    "settled_traces",
]


class Oracle(Machine, Parking, Messages):
    """Collects the ground truth and the violations of one run: every family of invariants over one record
    (:class:`OracleCore`)."""
