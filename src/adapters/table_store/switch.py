"""The deployment's formats switch (``engine.formats``) and each instance's word that it runs: entities of the
state table outside the shards (partition ``release``), and whether the store holds any task yet."""

from __future__ import annotations

import contextlib
from datetime import datetime

from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from engine import formats

from .codec import _etag
from .tables import _IF_MATCH, HISTORY, STATE, Unit

# The deployment's formats switch (engine.formats): one entity of the state table, outside the shards.
SWITCH_PARTITION, SWITCH_ROW = "release", "formats"
# Beside it, each instance's word that it runs (engine.formats.Instance): ``instance|<instance id>``.
INSTANCE_ROW = "instance|"


class FormatsSwitch(Unit):
    """The formats switch and the instances' words."""

    async def read_switch(self) -> formats.Switch | None:
        try:
            entity = await self.table.get_entity(SWITCH_PARTITION, SWITCH_ROW)
        except ResourceNotFoundError:
            return None
        self.counter.add(table=STATE, entities=1)
        writes = entity.get("Writes")
        if not isinstance(writes, int) or isinstance(writes, bool):
            writes = formats.BEFORE_SWITCH  # unreadable: the safe side, what the release before reads
        return formats.Switch(writes, entity.get("FlipsAt"), _etag(entity))

    async def write_switch(self, switch: formats.Switch) -> formats.Switch | None:
        entity = {"PartitionKey": SWITCH_PARTITION, "RowKey": SWITCH_ROW, "Writes": switch.writes}
        if switch.flips_at is not None:
            entity["FlipsAt"] = switch.flips_at
        self.counter.add(table=STATE, entities=1)
        try:
            if switch.etag is None:
                written = await self.table.create_entity(entity)
            else:
                written = await self.table.update_entity(
                    entity, mode=UpdateMode.REPLACE, etag=switch.etag, **_IF_MATCH
                )
        except (ResourceExistsError, ResourceModifiedError):
            return None
        return formats.Switch(switch.writes, switch.flips_at, written.get("etag"))

    async def announce(self, instance: formats.Instance) -> None:
        entity = {
            "PartitionKey": SWITCH_PARTITION,
            "RowKey": f"{INSTANCE_ROW}{instance.name}",
            "Release": instance.release,
            "Reads": instance.reads,
            "SeenAt": instance.seen_at,
        }
        if instance.serves is not None:
            # The workflow versions it serves, for new orders to take only those every instance has.
            entity["Serves"] = " ".join(sorted(instance.serves))
        self.counter.add(table=STATE, entities=1)
        await self.table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    async def instances(self) -> list[formats.Instance]:
        found = []
        async for e in self.table.query_entities(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            parameters={"pk": SWITCH_PARTITION, "lo": INSTANCE_ROW, "hi": INSTANCE_ROW[:-1] + "}"},
        ):
            self.counter.add(table=STATE, entities=1)
            reads, seen_at = e.get("Reads"), e.get("SeenAt")
            if isinstance(reads, int) and isinstance(seen_at, datetime):  # else not an instance's word
                name = e["RowKey"].removeprefix(INSTANCE_ROW)
                serves = e.get("Serves")
                said = frozenset(serves.split()) if isinstance(serves, str) else None
                found.append(formats.Instance(name, str(e.get("Release", "")), reads, seen_at, said))
        return found

    async def forget(self, instance: formats.Instance) -> None:
        self.counter.add(table=STATE, entities=1)
        with contextlib.suppress(ResourceNotFoundError):
            await self.table.delete_entity(SWITCH_PARTITION, f"{INSTANCE_ROW}{instance.name}")

    async def holds_tasks(self) -> bool:
        for table in (self.table, self.history):
            if table is None:
                continue
            pages = table.query_entities("PartitionKey ge 's' and PartitionKey lt 't'", results_per_page=1)
            self.counter.add(table=STATE if table is self.table else HISTORY, entities=1)
            async for _ in pages:
                return True
        return False
