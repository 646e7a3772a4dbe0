"""Each shard's tallies in the history table, so that counting what the history holds reads two entities a
shard, not the history: ``count``, how many finished tasks of each state the shard holds, changed in the
transaction that adds or purges a task (by the Supervisor and the clean-up, never on an order's own path);
and ``count|waiting``, how many parked tasks wait for each kind of thing (a row of its own: parks and their
returns never contend with the history's tally).

A tally is changed only in the transaction that changes what it counts, conditional on the tally's ETag;
the store keeps each tally as last read or written, so a stale one costs one refused transaction and a
read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode

from .codec import _TALLY, Codec, _etag, _tally_names, tally_entity
from .tables import _IF_MATCH, HISTORY, Tables, Unit


class Tallies(Unit):
    """The shards' tallies, and the history transactions that change them."""

    def __init__(self, tables: Tables, codec: Codec) -> None:
        super().__init__(tables, codec)
        # Each shard's tally as last read or written here (ETag, counts): a stale one costs one refused
        # transaction and a read.
        self._tallies: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}

    async def tally(self, pk: str, fresh: bool = False, row: str = _TALLY) -> tuple[str, dict[str, int]]:
        """A shard's tally in the history table (ETag "" and zeros: none written yet): of the finished tasks
        it holds by state, or (``row`` :data:`_WAITING_TALLY`) of the parked ones by what they wait for."""
        if not fresh and (pk, row) in self._tallies:
            return self._tallies[pk, row]
        names = _tally_names(row)
        self.counter.add(table=HISTORY, entities=1)
        try:
            entity = await self._history().get_entity(pk, row)
            tally = _etag(entity), {name: int(entity.get(name) or 0) for name in names}
        except ResourceNotFoundError:
            tally = "", dict.fromkeys(names, 0)
        self._tallies[pk, row] = tally
        return tally

    def _operation(
        self, pk: str, tally: tuple[str, dict[str, int]], change: Mapping[str, int], row: str = _TALLY
    ) -> Any:
        etag, counts = tally
        entity = tally_entity(pk, {k: counts[k] + change.get(k, 0) for k in counts}, row)
        if not etag:
            return ("create", entity)
        return ("update", entity, {"mode": UpdateMode.REPLACE, "etag": etag, **_IF_MATCH})

    async def submit_counted(
        self,
        pk: str,
        operations: list[Any],
        tally: tuple[str, dict[str, int]],
        change: Mapping[str, int],
        row: str = _TALLY,
    ) -> list[Mapping[str, Any]]:
        """A history transaction that changes the shard's tally by ``change`` (last operation); its
        results."""
        return await self.submit_tallied(pk, operations, {row: (tally, change)})

    async def submit_tallied(
        self,
        pk: str,
        operations: list[Any],
        changes: Mapping[str, tuple[tuple[str, dict[str, int]], Mapping[str, int]]],
    ) -> list[Mapping[str, Any]]:
        """A history transaction that changes one or more of the shard's tallies (by row: the tally as
        read, and the change), the tallies last; its results."""
        operations = [
            *operations,
            *(self._operation(pk, tally, change, row) for row, (tally, change) in changes.items()),
        ]
        self.counter.add(table=HISTORY, entities=len(operations))
        try:
            results = await self._transact(self._history(), operations)
        except TableTransactionError:
            for row in changes:
                self._tallies.pop((pk, row), None)
            raise
        for n, (row, (tally, change)) in enumerate(changes.items()):
            counts = {k: v + change.get(k, 0) for k, v in tally[1].items()}
            result = results[len(results) - len(changes) + n]
            self._tallies[pk, row] = str(result.get("etag") or ""), counts
        return results

    async def moved(self, pk: str, tally: tuple[str, dict[str, int]], row: str = _TALLY) -> bool:
        return (await self.tally(pk, True, row))[0] != tally[0]
