"""Finding orders by what support staff ask about: a customer, a storefront, a workflow, the time of
submission, the step an order is at and for how long, with or without its state.

Table Storage has no secondary index, so the state store keeps index entries, as it does for the listing by
state. At submission an order gets one search entry per thing it can be found by, each keyed by that thing
and then by the time of submission (``field|customerId|c-1|<created>|<id>|``, ``workflow|returns|...``,
``storefront|north|...``, ``submitted|<created>|<id>|``), in its shard of the search table. They never
change, so no step of the order pays for them; they are deleted when the order is purged.

A search reads the entries of one key (the most selective criterion given: a declared field, then the
storefront, the workflow, the submission time), one range query per shard, with the other criteria that
the entries carry (the workflow and its version, the storefront, the other fields) filtered by the table
service; it then reads each hit's state (one point read) for the criteria only the state knows (its
state, its step, how long it has been there). So a search costs what it returns, plus what the state
criteria turn away.

"At step X for more than N minutes" with no other key is read from the listing entries of the states an
order can be at a step in (Pending, Processing, Waiting, Compensating, Error): a copy of each task's state
record, filtered on its step and ``StepSince`` by the table service. That costs the live work, not the
history.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from .state import ProcessState, TaskState

# A value longer than this is keyed by its hash (a table key holds at most 1 KiB).
_MAX_KEYED = 200
# States an order can be "at a step" in.
AT_A_STEP = (
    ProcessState.PENDING,
    ProcessState.PROCESSING,
    ProcessState.WAITING,
    ProcessState.COMPENSATING,
    ProcessState.ERROR,
)


class SearchQuery(BaseModel):
    """What to find. Every criterion given must hold; ``positions`` are the (workflow, version, step index)
    the step name ``step`` is at in the deployed workflows (set by :class:`engine.tasks.TaskService`)."""

    model_config = ConfigDict(frozen=True)

    fields: dict[str, str] = Field(default_factory=dict)
    storefront: str | None = None
    workflow: str | None = None
    workflow_version: int | None = None
    step: str | None = None
    positions: tuple[tuple[str, int, int], ...] = ()
    at_step_before: datetime | None = None
    submitted_from: datetime | None = None
    submitted_to: datetime | None = None
    process_state: ProcessState | None = None
    waiting_for: str | None = None

    @property
    def keyed(self) -> bool:
        """Whether the search reads search entries; else (a step, or a time at the current step, with no
        criterion a search entry's key holds) it reads the listing entries of the states at a step."""
        at_step = self.step is not None or self.at_step_before is not None
        return not at_step or bool(
            self.fields or self.storefront or self.workflow or self.submitted_from or self.submitted_to
        )

    def holds(self, state: TaskState) -> bool:
        """Whether a task's state meets the criteria only its state knows."""
        if self.process_state is not None and state.process_state is not self.process_state:
            return False
        if self.waiting_for is not None and state.waiting_for != self.waiting_for:
            return False
        if self.workflow_version is not None and state.workflow_version != self.workflow_version:
            return False
        if self.step is not None or self.at_step_before is not None:
            at = (state.workflow, state.workflow_version, state.current_step)
            if state.process_state not in AT_A_STEP or (self.step is not None and at not in self.positions):
                return False
            if self.at_step_before is not None and (
                state.step_since is None or state.step_since > self.at_step_before
            ):
                return False
        return True


def searchable_values(names: tuple[str, ...], task_input: dict[str, Any]) -> dict[str, str] | None:
    """The values of the declared searchable fields an input carries (text, whole numbers, flags)."""
    found = {
        name: str(value).lower() if isinstance(value, bool) else str(value)
        for name in names
        if isinstance(value := task_input.get(name), str | int | bool) and str(value) != ""
    }
    return found or None


def key_value(value: str) -> str:
    """A value as a key holds it: escaped (table keys refuse ``/ \\ # ?``; ``|`` separates), or hashed."""
    escaped = quote(value, safe="")
    if len(escaped) <= _MAX_KEYED:
        return escaped
    return "sha256-" + hashlib.sha256(value.encode()).hexdigest()


def prefixes(state: TaskState) -> list[str]:
    """The key prefixes an order is found under (each followed by its submission time and id)."""
    found = [f"field|{name}|{key_value(value)}|" for name, value in sorted((state.search or {}).items())]
    if state.submitter:
        found.append(f"storefront|{key_value(state.submitter)}|")
    found.append(f"workflow|{state.workflow}|")
    found.append("submitted|")
    return found


def query_prefix(query: SearchQuery) -> str:
    """The key prefix a search reads: its most selective criterion."""
    if query.fields:
        name, value = sorted(query.fields.items())[0]
        return f"field|{name}|{key_value(value)}|"
    if query.storefront:
        return f"storefront|{key_value(query.storefront)}|"
    if query.workflow:
        return f"workflow|{query.workflow}|"
    return "submitted|"
