"""The state machine's moves: pure changes to a loaded task record, each returning a :class:`Decision`.

Each move first asks the table in :mod:`engine.machine` whether it is allowed; a refused move changes
nothing. An allowed one mutates the :class:`TaskRecord` in memory and returns the messages that must go
out once the record is saved, the alerts to raise, and the kind of move it made. Callers follow the rule
"update state, then send": a crash in between leaves a record whose CompleteBy will pass, and the
Supervisor recovers it.

The moves live by family, each module importing only those listed before it here (no circle):

- :mod:`.context`: what every move shares (:class:`Context`, the table's verdict, status messages, the
  document a condition and a call read, the step statuses moves sort by);
- :mod:`.call_log`: the steps' call records as the moves keep them;
- :mod:`.dispatch`: one step's request, its dispatch (forward or undo), or its leaving out;
- :mod:`.endings`: Processed, Compensated, or Error with its alert;
- :mod:`.groups`: steps side by side (dispatch, join, a step retried, recovered, or failed in a group);
- :mod:`.waiting`: a wait's start, as its kind says (``engine.waits``), its rules, and a wait that ends
  badly;
- :mod:`.compensation`: undo in reverse order;
- :mod:`.forward`: submission, claim, and the dispatch of the next step;
- :mod:`.replies`: an Agent's reply (or a callback) applied;
- :mod:`.operator`: the operator's moves on a task and its current step;
- :mod:`.wait_ends`: a timer's wake-up, an approval, a rejection;
- :mod:`.recovery`: the Supervisor's recovery of a task past its CompleteBy (a wait's, as its kind says).

This package's face re-exports the public moves (``transitions.claim``, ``from engine.transitions import
Context``). A move calls another through the name its own module imported, so a test that replaces a move
replaces it in the module that defines it and in every module of this package that imports it
(tests/simulation/moves.py does).
"""

from __future__ import annotations

from ..decisions import Decision, Outgoing, command, random_id
from ..settings import EngineSettings
from ..waits.timer import wake_command
from .context import (
    Context,
    allows,
    document,
    settled,
    status,
)
from .endings import error_alert, workflow_not_deployed
from .forward import claim, new_record_state
from .groups import redispatch
from .operator import (
    cancel,
    extend_step,
    open_updates,
    resubmit,
    retry_step,
    skip_step,
    update_input,
)
from .recovery import recover_expired
from .replies import apply_reply, awaits, reply_operation, step_failed, step_succeeded
from .wait_ends import approve, reject, wake, wake_early
from .waiting import deadline_passed

__all__ = [
    "Context",
    "Decision",
    "EngineSettings",
    "Outgoing",
    "allows",
    "apply_reply",
    "approve",
    "awaits",
    "cancel",
    "claim",
    "command",
    "deadline_passed",
    "document",
    "error_alert",
    "extend_step",
    "new_record_state",
    "open_updates",
    "random_id",
    "recover_expired",
    "redispatch",
    "reject",
    "reply_operation",
    "resubmit",
    "retry_step",
    "settled",
    "skip_step",
    "status",
    "step_failed",
    "step_succeeded",
    "update_input",
    "wake",
    "wake_command",
    "wake_early",
    "workflow_not_deployed",
]
