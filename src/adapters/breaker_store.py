"""The agents' shared circuit breakers on Azure Table Storage (Azurite locally).

One entity per service in the state table's ``breaker`` partition (RowKey = the service). The state
table, not a table of their own: they are a handful of small records that need the same account and
rights as the task state, a dedicated partition keeps them apart from the ``s00``.. task shards (like
the ``deadletters`` partition), reading all of them is one single-partition query, and no table has to
be provisioned (Bicep) or created for them. Every write is conditional on the entity's ETag (or on its
absence, for the first one), so two instances never both open a breaker or both take its trial call.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient

from engine import BreakerConflict, BreakerRecord, BreakerState

from .table_store import OperationCounter

BREAKER_PARTITION = "breaker"
# The name the operation counter files these requests under.
BREAKER = "breaker"

# Record field -> entity property; Table Storage has no nulls, so a None field is left out.
_FIELDS = {
    "state": "State",
    "consecutive_failures": "ConsecutiveFailures",
    "opened_at": "OpenedAt",
    "open_until": "OpenUntil",
    "probe_holder": "ProbeHolder",
    "probe_by": "ProbeBy",
    "updated_at": "UpdatedAt",
}


def _utc(value: Any) -> datetime | None:
    return value.astimezone(UTC) if isinstance(value, datetime) else None


class TableBreakerStore:
    """:class:`engine.breaker.BreakerStore` on the state table."""

    def __init__(self, table: TableClient, counter: OperationCounter | None = None) -> None:
        self.table = table
        self.counter = counter or OperationCounter()

    @staticmethod
    def _entity(record: BreakerRecord) -> dict[str, Any]:
        entity: dict[str, Any] = {"PartitionKey": BREAKER_PARTITION, "RowKey": record.service}
        for name, prop in _FIELDS.items():
            value = getattr(record, name)
            if value is not None:
                entity[prop] = value.value if isinstance(value, BreakerState) else value
        return entity

    @staticmethod
    def _record(entity: dict[str, Any]) -> BreakerRecord:
        return BreakerRecord(
            service=str(entity["RowKey"]),
            state=BreakerState(entity.get("State", BreakerState.CLOSED.value)),
            consecutive_failures=int(entity.get("ConsecutiveFailures", 0)),
            opened_at=_utc(entity.get("OpenedAt")),
            open_until=_utc(entity.get("OpenUntil")),
            probe_holder=entity.get("ProbeHolder"),
            probe_by=_utc(entity.get("ProbeBy")),
            updated_at=_utc(entity.get("UpdatedAt")),
            etag=entity.metadata["etag"] or None,  # type: ignore[attr-defined]
        )

    async def load_all(self) -> list[BreakerRecord]:
        """Every service's record: one query of the breaker partition."""
        entities = [
            e
            async for e in self.table.query_entities(
                "PartitionKey eq @pk", parameters={"pk": BREAKER_PARTITION}
            )
        ]
        self.counter.add(table=BREAKER, entities=len(entities))
        return [self._record(e) for e in entities]

    async def load(self, service: str) -> BreakerRecord | None:
        """One service's record (a point read), or None."""
        self.counter.add(table=BREAKER, entities=1)
        try:
            entity = await self.table.get_entity(BREAKER_PARTITION, service)
        except ResourceNotFoundError:
            return None
        return self._record(entity)

    async def save(self, record: BreakerRecord) -> BreakerRecord:
        """Insert (no ETag: only if there is none) or replace (only if the ETag matches) the record."""
        entity = self._entity(record)
        self.counter.add(table=BREAKER, entities=1)
        try:
            if record.etag is None:
                result = await self.table.create_entity(entity)
            else:
                result = await self.table.update_entity(
                    entity,
                    mode=UpdateMode.REPLACE,
                    etag=record.etag,
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceExistsError, ResourceModifiedError, ResourceNotFoundError) as exc:
            raise BreakerConflict(record.service) from exc
        return replace(record, etag=result["etag"])
