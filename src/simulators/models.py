"""Wire formats of the simulators: which services they play, fault settings and ledger entries.

The services, their routes and their request bodies come from the one declaration of the remote
services (``orders.catalog.SERVICES``): a simulator validates an apply call with the resource's ``body``
model, the very model the agents' client builds that body with. A service name anywhere here (the keys of
``POST /faults``, the ledger's files) must be a declared service.

Field names are snake_case in Python and camelCase on the wire (``orderId``, ``transientRate``), the
shape the agents send. Validation is strict (no "2" for 2, no true for 1) so that a caller's bug shows
up as a 400 here rather than as a silently coerced value.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, StringConstraints, TypeAdapter
from pydantic.alias_generators import to_camel

from orders.catalog import SERVICES as DECLARED
from orders.services.declaration import ServiceDefinition

# Every declared service, by name, in declaration order.
DEFINITIONS: dict[str, ServiceDefinition] = {service.name: service for service in DECLARED}
SERVICES: tuple[str, ...] = tuple(DEFINITIONS)


def _declared(name: str) -> str:
    if name not in DEFINITIONS:
        raise ValueError(f"{name!r} is not a declared service (declared: {', '.join(SERVICES)})")
    return name


# A service name, checked against the declaration wherever pydantic validates one.
ServiceName = Annotated[str, AfterValidator(_declared)]

MAX_KEY_LENGTH = 200
# An upper bound on latencyMs and hangMs: an hour is far beyond any client timeout, and it keeps a
# typo (an extra few zeros) from parking requests for days.
MAX_DELAY_MS = 3_600_000

Rate = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
DelayMs = Annotated[int, Field(ge=0, le=MAX_DELAY_MS)]


class FaultSettings(BaseModel):
    """The faults injected into one service's calls; every field defaults to "no fault"."""

    # Unknown fields are refused: a misspelt rate silently ignored would make a test pass for nothing.
    model_config = ConfigDict(
        strict=True, alias_generator=to_camel, validate_by_name=False, extra="forbid", frozen=True
    )

    transient_rate: Rate = 0.0
    permanent_rate: Rate = 0.0
    hang_rate: Rate = 0.0
    lost_reply_rate: Rate = 0.0
    latency_ms: DelayMs = 0
    hang_ms: DelayMs = 30_000
    # A resource declared asynchronous: the share of applies answered 202 and finished later by a signed
    # callback (after callbackDelayMs), and what happens to those callbacks: never sent, sent twice, or
    # sent callbackLateMs later than the others.
    async_rate: Rate = 0.0
    callback_delay_ms: DelayMs = 200
    callback_lost_rate: Rate = 0.0
    callback_duplicate_rate: Rate = 0.0
    callback_late_rate: Rate = 0.0
    callback_late_ms: DelayMs = 5_000

    def wire(self) -> dict[str, float | int]:
        """The camelCase JSON form, every field included."""
        return self.model_dump(by_alias=True)


# ``POST /faults``: a subset of the services, each with its complete new settings.
FAULTS_UPDATE = TypeAdapter(dict[ServiceName, FaultSettings])


# Values by their wire names: what a service returned, or the declared result values a call's body carried.
Values = dict[str, JsonValue]
# A number that orders the ledger's changes: each change's is higher than those of the changes before it.
Sequence = Annotated[int, Field(ge=1)]
# A W3C trace id, as ``engine.tracing.trace_id`` gives it: 32 lowercase hex digits.
TraceId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
# The most distinct trace ids an entry keeps: its calls should all come in one trace (their order's), so a
# few are enough to show that some did not, and the entry stays small whatever its callers send.
MAX_TRACE_IDS = 4


class LedgerEntry(BaseModel):
    """What the ledger knows about one idempotency key of one service.

    Besides whether the effect is applied and undone: ``result``, the declared result values the apply
    answered (every replay answers the same); ``carried`` and ``undo_carried``, the bodies of the apply and
    of the undo as received (every field, among them the values of declared result names), so a
    check can compare each with the value its producing step returned; ``applied_seq`` and
    ``compensated_seq``, where the apply and the undo stand in the ledger's order of changes;
    ``trace_ids``, the distinct trace ids of the ``traceparent`` headers its calls that reached the ledger
    (applies, replays included, and undos; not those a fault turned away first) came with, in the order
    first seen, at most :data:`MAX_TRACE_IDS` (empty: no call came with one). An entry recorded before
    the ledger kept these (format 1 or 2; format 3 for ``trace_ids``) has None in each: nothing is known.
    """

    model_config = ConfigDict(strict=True, frozen=True, validate_by_name=True, validate_by_alias=True)

    order_id: str = Field(alias="orderId")
    applied: Literal[0, 1]
    compensated: Literal[0, 1]
    result: Values | None = None
    carried: Values | None = None
    undo_carried: Values | None = Field(default=None, alias="undoCarried")
    applied_seq: Sequence | None = Field(default=None, alias="appliedSeq")
    compensated_seq: Sequence | None = Field(default=None, alias="compensatedSeq")
    trace_ids: tuple[TraceId, ...] | None = Field(default=None, alias="traceIds")

    def wire(self) -> dict[str, Any]:
        """The JSON form served by ``GET /ledger`` and written to the ledger's files, every field present."""
        return self.model_dump(by_alias=True, mode="json")

    def traced(self, trace_id: str | None) -> LedgerEntry:
        """This entry with ``trace_id`` among its trace ids; itself when there is none, it is there
        already, or the entry holds as many as it keeps."""
        known = self.trace_ids or ()
        if trace_id is None or trace_id in known or len(known) >= MAX_TRACE_IDS:
            return self
        return self.model_copy(update={"trace_ids": (*known, trace_id)})


class LedgerFile(BaseModel):
    """The ledger's snapshot on disk. ``version`` lets a later format be told apart from this one.

    Version 2 adds ``sequence``: the number of the last journal record the snapshot includes. A version 1
    file (written before the journal existed) holds everything, and reads as sequence 0. Version 3 adds
    the entries' results, carried values and change numbers (see :class:`LedgerEntry`); entries of an
    older file read without them. Version 4 adds the entries' trace ids, and journal lines that change
    nothing else (a replay or an undo again, in a trace the entry had not seen), which no earlier version
    would replay.
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    version: Literal[1, 2, 3, 4]
    sequence: Annotated[int, Field(ge=0)] = 0
    services: dict[ServiceName, dict[str, LedgerEntry]]


class JournalRecord(BaseModel):
    """One line of the ledger's journal: the entry of one key after one change, and the change's number."""

    model_config = ConfigDict(strict=True, extra="forbid")

    seq: Annotated[int, Field(ge=1)]
    service: ServiceName
    key: str
    entry: LedgerEntry
