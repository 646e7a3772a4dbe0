"""The one mapping between a task and what the tables store of it: keys, entities and back. No I/O here.

A task (:class:`engine.state.TaskRecord`: its :class:`TaskState`, its :class:`StepState` s, its input, its
audit entries) is stored in these shapes, each built and read back here only:

- live, in the state table (shard ``s00``..``s{N-1}`` of its OrderID, so that its records change together
  in one entity-group transaction): ``order|<id>|state`` (the state entity), ``order|<id>|input`` (the
  submitted body, in chunks), ``order|<id>|step|NN`` (one per step), ``audit|<id>|<time>|<n>`` (one per
  audit entry; outside the ``order|<id>|`` range, so loading a task never reads its history) and
  ``index|<ProcessState>|<time>|<id>|`` (its listing entry: a copy of the state entity, whose
  ``IndexKey`` names it);
- its watch entry (keyed by shard and OrderID, holding a CompleteBy);
- in one entity of the history table, ``order|<id>``: finished (``Kind`` archive) or parked (``Kind``
  parked), state, steps and input together, with its listing entry; the mark of a task in the live records
  (``Kind`` returned); each shard's tallies (``count``, ``count|waiting``); a parked task's calendar entry;
- its search entries (``engine.search``).

Every record says the format it was written in (``engine.formats``). The properties a later release writes
on a record are kept (``TaskRecord.kept``) and written back with the record, never dropped; a task in one
entity carries those of its input and step records under prefixes of their own. What this release cannot
read is reported as :class:`NotUnderstood` (a listing, a search or a clean-up passes over it).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from azure.data.tables import TableEntity, UpdateMode
from pydantic import TypeAdapter, ValidationError

from engine import (
    PARKED,
    AuditEntry,
    CallEntry,
    NotUnderstood,
    ProcessState,
    StepState,
    TaskRecord,
    TaskState,
    formats,
    prefixes,
    telemetry,
)

_BODY_CHUNK = 30_000  # characters; a string property holds 64 KiB of UTF-16
_STATE_FIELDS = {name: field.alias or name for name, field in TaskState.model_fields.items()}
_STEP_FIELDS = {name: field.alias or name for name, field in StepState.model_fields.items()}
_AUDIT_FIELDS = [field.alias or name for name, field in AuditEntry.model_fields.items()]
# A step's Calls (and a whole task's Steps) are JSON text: parsed straight into their models, in one pass
# (json.loads and then a validation of the dicts costs about twice as much).
_CALLS = TypeAdapter(list[CallEntry])
_STEPS = TypeAdapter(list[StepState])
# What a record stores as JSON text, written as json.dumps writes it (compact; the searchable fields and the
# input with their keys sorted), by encoders made once rather than at every call of json.dumps.
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode
_COMPACT_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode
_FORMAT = formats.FORMAT_PROPERTY
# The properties this release writes on each of a task's live records. Any other a record holds was written
# by a later release: kept as it is (TaskRecord.kept) and written back with the record, never dropped.
_KEYS = {"PartitionKey", "RowKey", "Kind", _FORMAT}
# (Parking: a park under way, which the next save clears; AuditedAt: the input's touch by an audit entry.)
_STATE_PROPERTIES = frozenset({*_KEYS, *_STATE_FIELDS.values(), "Watched", "IndexKey", "Parking"})
_STEP_PROPERTIES = frozenset({*_KEYS, *_STEP_FIELDS.values(), "OrderID"})
_INPUT_PROPERTIES = frozenset({*_KEYS, "OrderID", "BodyHash", "BodyChunks", "AuditedAt"})
_LIVE_PROPERTIES = {"state": _STATE_PROPERTIES, "input": _INPUT_PROPERTIES, "step": _STEP_PROPERTIES}
_WHOLE_PROPERTIES = frozenset(
    {*_STATE_PROPERTIES, "BodyHash", "Audited", "StepsChunks", "BodyChunks", "Claimed"}
    - {"Watched", "Parking"}
)
_CHUNK = re.compile(r"(Body|Steps)\d+$")
# A task in one entity (parked, or in the history) carries what a later release stored on its input and
# step records under these prefixes, so bringing it back writes them again: a save drops no property.
_KEPT_INPUT, _KEPT_STEP = "KeptInput_", re.compile(r"KeptStep(\d+)_(.+)$")
# The states the history holds.
FINISHED = tuple(state for state in ProcessState if state.finished)
# A shard's tally of finished tasks in the history.
_TALLY = "count"
# The kinds of the history table's one-entity tasks: a finished task, and a parked one.
_WHOLE = ("archive", "parked")
# What a parked task leaves under its key once it is back in the live records: a marker saying "read the
# live records again" (a reader that missed them just before they were written finds them then), written
# over when the task moves to the history or is parked again.
_RETURNED = "returned"
# Each shard's tally of the parked tasks, by what they wait for (a row of its own: parks and their returns
# never contend with the history's tally).
WAITING_TALLY = _WAITING_TALLY = "count|waiting"
PARKED_KINDS = PARKED  # the tallies of parked orders, one per kind that parks
# The calendar of parked tasks: one partition of the history table, ``<time the wait ends>|<id>`` per task,
# and its cursor (when the calendar is to be read next).
CALENDAR = "calendar"
_CURSOR = "cursor"


def shard_of(order_id: str, shards: int) -> str:
    """The partition a task lives in: stable for an id, spread evenly."""
    return f"s{zlib.crc32(order_id.encode()) % shards:02d}"


def _stamp(at: datetime) -> str:
    """A time as a fixed-width string that sorts as the time does."""
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _state_key(order_id: str) -> str:
    return f"order|{order_id}|state"


def _input_key(order_id: str) -> str:
    return f"order|{order_id}|input"


def _step_prefix(order_id: str) -> str:
    return f"order|{order_id}|step|"


def _step_key(order_id: str, index: int) -> str:
    return f"{_step_prefix(order_id)}{index:02d}"


def _audit_prefix(order_id: str) -> str:
    return f"audit|{order_id}|"


def _listing_class(state: ProcessState, waiting_for: str | None) -> str:
    """What a listing entry's key is grouped by: the state, and for Waiting what the task waits for, so
    the Waiting tasks of one kind are one key range of their own (listed and counted without the others)."""
    if state is ProcessState.WAITING and waiting_for:
        return f"{state.value}|{waiting_for}"
    return state.value


def listing_key(state: ProcessState, since: datetime, order_id: str, waiting_for: str | None = None) -> str:
    """A task's entry in the listing of ``state``, which it entered at ``since``: a shard's entries of one
    state are one key range, oldest first (Waiting: one range per kind of wait, within the state's). Like
    every key that names a task, it holds ``|<id>|``."""
    return f"index|{_listing_class(state, waiting_for)}|{_stamp(since)}|{order_id}|"


def _listing_range(
    state: ProcessState, before: datetime | None = None, waiting_for: str | None = None
) -> tuple[str, str]:
    prefix = f"index|{_listing_class(state, waiting_for)}|"
    return prefix, prefix + (_stamp(before) if before is not None else "~")


def _listed_state(key: str) -> str:
    return key.split("|", 2)[1]


def _listed_wait(key: str) -> str | None:
    """What a Waiting task's listing entry says it waits for (None for another state's entry)."""
    parts = key.split("|", 3)
    return parts[2] if parts[1] == ProcessState.WAITING.value and len(parts) > 3 else None


def _archive_key(order_id: str) -> str:
    return f"order|{order_id}"


def _gone_key(until: datetime, order_id: str) -> str:
    return f"gone|{_stamp(until)}|{order_id}|"


def _leftover(found: Mapping[str, Any], whole: Mapping[str, Any]) -> bool:
    """Whether what the history table holds under a task's key is what the task may be written over: a
    stale parked copy of the same task, or the marker of its return to the live records."""
    kind = found.get("Kind")
    return kind == _RETURNED or (kind == "parked" and found.get("CreatedAt") == whole["CreatedAt"])


def _tally_names(row: str) -> tuple[str, ...]:
    return PARKED_KINDS if row == _WAITING_TALLY else tuple(s.value for s in FINISHED)


def _chunks(text: str) -> list[str]:
    return [text[i : i + _BODY_CHUNK] for i in range(0, len(text), _BODY_CHUNK)] or [""]


def _joined(entity: Mapping[str, Any], prefix: str) -> str:
    return "".join(entity.get(f"{prefix}{i}", "") for i in range(int(entity.get(f"{prefix}Chunks", 0))))


def _etag(entity: Any) -> str:
    return str(entity.metadata.get("etag") or "")


class Codec:
    """The entities of a task for a store of ``shards`` shards (and the task of its entities)."""

    def __init__(self, shards: int, unique: Callable[[], str]) -> None:
        """``unique`` gives the eight characters that keep two audit entries of one microsecond apart
        (random; the simulation's come from its seed)."""
        self.shards = shards
        self._unique = unique
        # The record format it writes (engine.formats): the runtime's, kept current by the switch.
        self.formats = formats.Formats()

    def pk(self, order_id: str) -> str:
        return shard_of(order_id, self.shards)

    def state_properties(self, state: TaskState) -> dict[str, Any]:
        entity: dict[str, Any] = {"PartitionKey": self.pk(state.order_id), _FORMAT: self.formats.writes}
        for name, alias in _STATE_FIELDS.items():
            value = getattr(state, name)
            if value is None:
                continue  # Table storage has no nulls: a missing property reads back as None
            if name == "search":
                value = _COMPACT_SORTED(value)
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def state_entity(self, record: TaskRecord) -> dict[str, Any]:
        state = record.state
        entity = {**record.kept.get(_state_key(state.order_id), {}), **self.state_properties(state)}
        entity["RowKey"] = _state_key(state.order_id)
        entity["Kind"] = "state"
        entity["Watched"] = state.process_state.in_flight and state.complete_by is not None
        return entity

    def listing_key_of(self, record: TaskRecord) -> str:
        """The task's listing entry for its state now: the one it has while its state stays the same."""
        state = record.state
        listed = record.listed
        if listed is not None and listed.startswith(
            _listing_range(state.process_state, None, state.waiting_for)[0]
        ):
            return listed
        return listing_key(state.process_state, state.updated_at, state.order_id, state.waiting_for)

    def listing_operations(self, record: TaskRecord, state_entity: dict[str, Any]) -> list[Any]:
        """Set the state record's ``IndexKey`` and return the operations that keep the listing with it: the
        entry (a copy of the state record) written, and the previous state's entry deleted."""
        entry = self.listing_entry(record, state_entity)
        key = entry["RowKey"]
        operations: list[Any] = [("upsert", entry, {"mode": UpdateMode.REPLACE})]
        if record.listed is not None and record.listed != key:
            operations.append(
                ("delete", {"PartitionKey": state_entity["PartitionKey"], "RowKey": record.listed})
            )
        return operations

    def listing_entry(self, record: TaskRecord, state_entity: dict[str, Any]) -> dict[str, Any]:
        """Set the state record's ``IndexKey`` and return its listing entry (a copy of the state record)."""
        key = self.listing_key_of(record)
        state_entity["IndexKey"] = key
        entry = {**state_entity, "RowKey": key, "Kind": "index"}
        del entry["Watched"]
        return entry

    def step_entity(self, order_id: str, step: StepState, kept: Mapping[str, Any] = {}) -> dict[str, Any]:
        entity: dict[str, Any] = {
            **kept,
            "PartitionKey": self.pk(order_id),
            "RowKey": _step_key(order_id, step.index),
            "Kind": "step",
            _FORMAT: self.formats.writes,
            "OrderID": order_id,
        }
        for name, alias in _STEP_FIELDS.items():
            value = getattr(step, name)
            if value is None:
                continue
            if name == "result":
                value = _COMPACT(value)
            elif name == "calls":
                if not value:
                    continue
                value = _COMPACT(_CALLS.dump_python(value, mode="json", by_alias=True, exclude_none=True))
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def input_entity(self, record: TaskRecord) -> dict[str, Any]:
        body = _COMPACT_SORTED(record.input)
        chunks = _chunks(body)
        entity: dict[str, Any] = {
            **record.kept.get(_input_key(record.order_id), {}),
            "PartitionKey": self.pk(record.order_id),
            "RowKey": _input_key(record.order_id),
            "Kind": "input",
            _FORMAT: self.formats.writes,
            "OrderID": record.order_id,
            "BodyHash": record.input_hash,
            "BodyChunks": len(chunks),
        }
        for i, chunk in enumerate(chunks):
            entity[f"Body{i}"] = chunk
        return entity

    def watch_entity(self, state: TaskState) -> dict[str, Any]:
        return {
            "PartitionKey": self.pk(state.order_id),
            "RowKey": state.order_id,
            _FORMAT: self.formats.writes,
            "CompleteBy": state.complete_by,
        }

    def search_entities(self, state: TaskState) -> list[dict[str, Any]]:
        """A task's search entries: each carries what a search filters on besides its key."""
        carried: dict[str, Any] = {
            "PartitionKey": self.pk(state.order_id),
            _FORMAT: self.formats.writes,
            "OrderID": state.order_id,
            "CreatedAt": state.created_at,
            "Workflow": state.workflow,
            "WorkflowVersion": state.workflow_version,
        }
        if state.submitter:
            carried["Submitter"] = state.submitter
        for name, value in (state.search or {}).items():
            carried[f"Q_{name}"] = value
        return [{**carried, "RowKey": key} for key in self.search_keys(state)]

    def archive_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A finished task as the history keeps it: the task in one entity, and its listing entry (also for
        tools that fill a history directly, with :meth:`tally_entity` for the shard's count)."""
        state = record.state
        key = listing_key(state.process_state, state.updated_at, state.order_id)
        return self.whole_entities(record, "archive", key, audited)

    def parked_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A waiting task as it is parked: the task in one entity (as the history keeps a finished one), and
        its listing entry, under the key it had in the live table."""
        return self.whole_entities(record, "parked", self.listing_key_of(record), audited)

    def whole_entities(
        self, record: TaskRecord, kind: str, key: str, audited: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        state = record.state
        summary = {**self.state_properties(state), "IndexKey": key, "Audited": audited}
        steps = _COMPACT(_STEPS.dump_python(record.steps, mode="json", by_alias=True, exclude_none=True))
        body = _COMPACT_SORTED(record.input)
        whole: dict[str, Any] = {
            **record.kept.get(_state_key(state.order_id), {}),
            **summary,
            "RowKey": _archive_key(state.order_id),
            "Kind": kind,
            "BodyHash": record.input_hash,
        }
        for row, properties in record.kept.items():
            if row == _input_key(state.order_id):
                whole.update({f"{_KEPT_INPUT}{name}": v for name, v in properties.items()})
            elif row.startswith(_step_prefix(state.order_id)):
                index = int(row.rsplit("|", 1)[1])
                whole.update({f"KeptStep{index:02d}_{name}": v for name, v in properties.items()})
        for prefix, text in (("Steps", steps), ("Body", body)):
            chunks = _chunks(text)
            whole[f"{prefix}Chunks"] = len(chunks)
            for i, chunk in enumerate(chunks):
                whole[f"{prefix}{i}"] = chunk
        return whole, {**summary, "RowKey": key, "Kind": "index"}

    def from_archive(self, entity: TableEntity) -> TaskRecord:
        """A task read from the history table: finished (read-only), or parked (saved back to the live
        records)."""
        state = to_state(entity)
        with _Understood(entity):
            steps = _STEPS.validate_json(_joined(entity, "Steps"))
            body = _joined(entity, "Body")
            document = json.loads(body) if body else {}
        parked = entity.get("Kind") == "parked"
        return TaskRecord(
            state=state,
            steps=steps,
            input=document,
            input_hash=entity["BodyHash"],
            kept=_kept_rows(state.order_id, _unknown(entity, _WHOLE_PROPERTIES)),
            etags={_archive_key(entity["OrderID"]): _etag(entity)},
            archived=not parked,
            parked=parked,
            audited=bool(entity.get("Audited")),
            listed=entity.get("IndexKey") if parked else None,
        )

    def audit_entity(self, order_id: str, entry: AuditEntry, n: int) -> dict[str, Any]:
        # Time first so a range query returns the history in order; a random tail keeps two entries
        # written in the same microsecond (two instances) apart.
        entity: dict[str, Any] = {
            "PartitionKey": self.pk(order_id),
            "RowKey": f"{_audit_prefix(order_id)}{_stamp(entry.at)}|{n:02d}{self._unique()}",
            "Kind": "audit",
            _FORMAT: self.formats.writes,
            "OrderID": order_id,
        }
        for alias, value in entry.model_dump(by_alias=True, mode="python").items():
            if value is not None:
                entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def search_keys(self, state: TaskState) -> list[str]:
        """The keys of a task's search entries (``engine.search``)."""
        tail = f"{_stamp(state.created_at)}|{state.order_id}|"
        return [prefix + tail for prefix in prefixes(state)]


def to_state(entity: Mapping[str, Any]) -> TaskState:
    """The task state a record holds; raises :class:`NotUnderstood` (reported) for one of a later
    format or one this release cannot read."""
    with _Understood(entity):
        values = {alias: entity[alias] for alias in _STATE_FIELDS.values() if entity.get(alias) is not None}
        if isinstance(values.get("Search"), str):
            values["Search"] = json.loads(values["Search"])
        return TaskState.model_validate(values)


def readable_state(entity: Mapping[str, Any]) -> TaskState | None:
    """:func:`to_state`, or None for a record this release cannot read (reported; a listing, a search
    or a clean-up passes over it)."""
    return _or_passed_over(to_state, entity)


def to_step(entity: Mapping[str, Any]) -> StepState:
    with _Understood(entity):
        values = {alias: entity[alias] for alias in _STEP_FIELDS.values() if entity.get(alias) is not None}
        if "Result" in values:
            values["Result"] = json.loads(values["Result"])
        if "Calls" in values:
            values["Calls"] = _CALLS.validate_json(values["Calls"])
        return StepState.model_validate(values)


def to_audit(entity: Mapping[str, Any]) -> AuditEntry:
    with _Understood(entity):
        return AuditEntry.model_validate({a: entity[a] for a in _AUDIT_FIELDS if entity.get(a) is not None})


def tally_entity(pk: str, counts: Mapping[str, int], row: str = _TALLY) -> dict[str, Any]:
    """A shard's tally of the finished tasks its history holds, per state name (or, ``row``
    :data:`_WAITING_TALLY`, of the parked tasks, per what they wait for)."""
    return {"PartitionKey": pk, "RowKey": row, **{n: counts.get(n, 0) for n in _tally_names(row)}}


def calendar_entity(state: TaskState) -> dict[str, Any]:
    """A parked task's entry in the calendar, at the time its wait ends (a timer's time, an approval's
    deadline; also for tools that park directly)."""
    due = state.wait_until or state.complete_by
    assert due is not None
    return {
        "PartitionKey": CALENDAR,
        "RowKey": f"{_stamp(due)}|{state.order_id}",
        "OrderID": state.order_id,
    }


def _marker(pk: str, order_id: str, created_at: Any) -> dict[str, Any]:
    """The history's row for a task in the live records: its mark at submission, or the marker of its
    return from parking."""
    return {
        "PartitionKey": pk,
        "RowKey": _archive_key(order_id),
        "Kind": _RETURNED,
        "OrderID": order_id,
        "CreatedAt": created_at,
    }


class _Understood:
    """Turns what this release cannot read in a stored record (a later format, a value it does not know,
    a corrupted property) into :class:`NotUnderstood`, reported with the order and the record named.

    A class rather than a ``contextlib.contextmanager`` generator: it wraps every record read, and a
    generator costs about as much to start and stop as a step's own reading."""

    __slots__ = ("_entity",)

    def __init__(self, entity: Mapping[str, Any]) -> None:
        self._entity = entity

    def __enter__(self) -> None:
        try:
            formats.record_format(self._entity.get(_FORMAT))
        except NotUnderstood as exc:
            raise self._reported(exc.what) from exc

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, NotUnderstood):
            raise self._reported(exc.what) from exc
        if isinstance(exc, ValidationError | ValueError | KeyError | TypeError):
            raise self._reported(f"it cannot be read: {exc}") from exc

    def _reported(self, what: str) -> NotUnderstood:
        entity = self._entity
        order_id = entity.get("OrderID") if isinstance(entity.get("OrderID"), str) else None
        return _reported(entity, what, order_id)


def _or_passed_over[T](read: Callable[[Mapping[str, Any]], T], entity: Mapping[str, Any]) -> T | None:
    """What ``read`` makes of a stored record, or None for one this release cannot read (reported)."""
    try:
        return read(entity)
    except NotUnderstood:
        return None


def _reported(entity: Mapping[str, Any], what: str, order_id: str | None) -> NotUnderstood:
    row = entity.get("RowKey")
    telemetry.emit_event(telemetry.NOT_UNDERSTOOD, orderId=order_id, record=row, what=what[:500])
    return NotUnderstood(f"its record {row}: {what}", order_id)


def _kept_rows(order_id: str, unknown: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The later release's properties of a task kept in one entity, back on the records they came from."""
    rows: dict[str, dict[str, Any]] = {}
    for name, value in unknown.items():
        if name.startswith(_KEPT_INPUT):
            row, name = _input_key(order_id), name.removeprefix(_KEPT_INPUT)
        elif match := _KEPT_STEP.match(name):
            row, name = _step_key(order_id, int(match[1])), match[2]
        else:
            row = _state_key(order_id)
        rows.setdefault(row, {})[name] = value
    return rows


def _unknown(entity: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The properties of a stored record this release does not write (a later release's): kept."""
    return {name: value for name, value in entity.items() if name not in known and not _CHUNK.match(name)}
