"""DeadLettersApi in-process: a dead-letter port in memory, the real engine over in-memory ports."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from engine.clock import ManualClock
from engine.deadletters import (
    DeadLetter,
    DeadLetterAction,
    DeadLetterCount,
    DeadLetterNotFound,
    DeadLetterPage,
    DeadLetterUnreachable,
    order_id_of,
)
from engine.parts import EngineParts
from engine.queues import SCHEDULER_QUEUE, agent_queue
from engine.settings import EngineSettings
from engine.state import AuditEntry
from engine.tasks import TaskService
from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders.api import Call
from orders.deadletters import DeadLetterParts, DeadLettersApi
from tests.engine.fakes import MemoryStore, RecordingSender

pytestmark = pytest.mark.anyio

# A workflow of the tests' own, on one agent: the dead-letter API serves whatever queues it is given.
WORKFLOW = WorkflowDefinition(
    name="w", steps=(StepDefinition(name="only", agent="alpha", action="do", compensation="undo"),)
)
AGENT_QUEUE = agent_queue("alpha")
QUEUES = (SCHEDULER_QUEUE, AGENT_QUEUE)
ORDER = {"customerId": "c", "items": [{"sku": "a", "quantity": 1, "unitPrice": 1.0}], "currency": "EUR"}


def letter(seq: int, order_id: str | None = None) -> DeadLetter:
    return DeadLetter(
        sequence_number=seq,
        message_id=f"m-{seq}",
        reason="MaxDeliveryCountExceeded",
        description="too many deliveries",
        enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
        delivery_count=5,
        order_id=order_id,
    )


class MemoryDeadLetters:
    """The port in memory: one dead-letter list per queue, replays sent to ``sent``."""

    def __init__(self) -> None:
        self.queues: dict[str, list[DeadLetter]] = {q: [] for q in QUEUES}
        self.sent: list[tuple[str, int]] = []
        self.unreachable = False

    async def count(self, queue: str, limit: int) -> DeadLetterCount:
        n = len(self.queues[queue])
        return DeadLetterCount(queue=queue, count=min(n, limit), at_least=n > limit)

    async def peek(self, queue: str, from_sequence_number: int, max_count: int) -> DeadLetterPage:
        found = [m for m in self.queues[queue] if m.sequence_number >= from_sequence_number]
        following = found[max_count].sequence_number if len(found) > max_count else None
        return DeadLetterPage(items=found[:max_count], next_sequence_number=following)

    def _take(self, queue: str, seq: int) -> DeadLetter:
        message = next((m for m in self.queues[queue] if m.sequence_number == seq), None)
        if message is None:
            raise DeadLetterNotFound(seq)
        if self.unreachable:
            raise DeadLetterUnreachable("locked elsewhere")
        self.queues[queue].remove(message)
        return message

    async def replay(self, queue: str, sequence_number: int) -> DeadLetter:
        message = self._take(queue, sequence_number)
        self.sent.append((queue, sequence_number))
        return message

    async def purge(self, queue: str, sequence_number: int) -> DeadLetter:
        return self._take(queue, sequence_number)


class MemoryAudit:
    def __init__(self) -> None:
        self.orders: dict[str, list[AuditEntry]] = {}
        self.queues: list[DeadLetterAction] = []

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        self.orders.setdefault(order_id, []).append(entry)

    async def append_dead_letter_audit(self, entry: DeadLetterAction) -> None:
        self.queues.append(entry)

    async def dead_letter_audit(self, queue: str) -> list[DeadLetterAction]:
        return [e for e in self.queues if e.queue == queue]


class Harness:
    def __init__(self) -> None:
        store = MemoryStore()
        engine = EngineParts(
            WorkflowCatalog.of(WORKFLOW), store, RecordingSender(), ManualClock(), EngineSettings()
        )
        self.tasks = TaskService(engine)
        self.port = MemoryDeadLetters()
        self.audit = MemoryAudit()
        self.parts = DeadLetterParts(self.port, self.audit, self.tasks, QUEUES)
        self.api = DeadLettersApi(self._parts, QUEUES)

    async def _parts(self) -> DeadLetterParts:
        return self.parts


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_counts_cover_every_queue(h: Harness) -> None:
    h.port.queues[AGENT_QUEUE] = [letter(1), letter(2)]
    reply = await h.api.counts()
    assert reply.status == 200
    assert reply.body["items"] == [
        {"queue": SCHEDULER_QUEUE, "count": 0, "atLeast": False},
        {"queue": AGENT_QUEUE, "count": 2, "atLeast": False},
    ]


async def test_listing_is_paged_by_sequence_number(h: Harness) -> None:
    h.port.queues[AGENT_QUEUE] = [letter(n, "o-1") for n in (3, 5, 8)]
    first = await h.api.list(AGENT_QUEUE, {"pageSize": "2"})
    assert [m["sequenceNumber"] for m in first.body["items"]] == [3, 5]
    assert first.body["nextSequenceNumber"] == 8
    assert first.body["items"][0]["reason"] == "MaxDeliveryCountExceeded"
    assert first.body["items"][0]["orderId"] == "o-1"
    rest = await h.api.list(AGENT_QUEUE, {"fromSequenceNumber": "8"})
    assert [m["sequenceNumber"] for m in rest.body["items"]] == [8]
    assert rest.body["nextSequenceNumber"] is None


@pytest.mark.parametrize(
    "query", [{"pageSize": "0"}, {"pageSize": "101"}, {"pageSize": "x"}, {"fromSequenceNumber": "-1"}]
)
async def test_bad_listing_queries_are_400(h: Harness, query: dict[str, str]) -> None:
    reply = await h.api.list(AGENT_QUEUE, query)
    assert (reply.status, reply.body["error"]["code"]) == (400, "ValidationFailed")


async def test_unknown_queues_are_404_everywhere(h: Harness) -> None:
    for reply in [
        await h.api.list("nope", {}),
        await h.api.audit("nope"),
        await h.api.replay("nope", "1", Call()),
        await h.api.purge("nope", "1", Call()),
    ]:
        assert (reply.status, reply.body["error"]["code"]) == (404, "NotFound")


async def test_replay_of_an_order_s_message_is_audited_on_the_order(h: Harness) -> None:
    await h.tasks.submit("o-1", {"orderId": "o-1", **ORDER}, "hash")
    h.port.queues[AGENT_QUEUE] = [letter(7, "o-1")]
    call = Call(json.dumps({"note": "fixed"}).encode(), "application/json", actor="user:ann oid:0001")
    reply = await h.api.replay(AGENT_QUEUE, "7", call)
    assert reply.status == 200, reply.body
    assert reply.body["auditedOn"] == "order:o-1" and reply.body["message"]["sequenceNumber"] == 7
    assert h.port.sent == [(AGENT_QUEUE, 7)]
    [entry] = h.audit.orders["o-1"]
    assert entry.action == "deadletter-replay" and entry.note == "fixed"
    assert entry.actor == "user:ann oid:0001"
    assert entry.process_state_before == entry.process_state_after
    assert "sequence number 7" in (entry.detail or "")
    assert h.audit.queues == []


async def test_a_message_naming_no_known_order_is_audited_on_its_queue(h: Harness) -> None:
    h.port.queues[AGENT_QUEUE] = [letter(1, "unknown-order"), letter(2)]
    assert (await h.api.purge(AGENT_QUEUE, "1", Call())).body["auditedOn"] == f"deadletters:{AGENT_QUEUE}"
    assert (await h.api.purge(AGENT_QUEUE, "2", Call())).status == 200
    trail = await h.api.audit(AGENT_QUEUE)
    assert [(e["action"], e["sequenceNumber"], e["orderId"]) for e in trail.body["items"]] == [
        ("purge", 1, "unknown-order"),
        ("purge", 2, None),
    ]
    assert h.port.queues[AGENT_QUEUE] == [] and h.port.sent == []


async def test_bad_or_unknown_sequence_numbers_change_nothing(h: Harness) -> None:
    h.port.queues[AGENT_QUEUE] = [letter(1)]
    bad = await h.api.replay(AGENT_QUEUE, "x1", Call())
    assert (bad.status, bad.body["error"]["code"]) == (400, "ValidationFailed")
    missing = await h.api.replay(AGENT_QUEUE, "2", Call())
    assert (missing.status, missing.body["error"]["code"]) == (404, "NotFound")
    wrong_body = await h.api.purge(AGENT_QUEUE, "1", Call(b'{"nope": 1}', "application/json"))
    assert (wrong_body.status, wrong_body.body["error"]["code"]) == (400, "ValidationFailed")
    h.port.unreachable = True
    locked = await h.api.purge(AGENT_QUEUE, "1", Call())
    assert (locked.status, locked.body["error"]["code"]) == (409, "Unreachable")
    assert len(h.port.queues[AGENT_QUEUE]) == 1 and h.port.sent == []
    assert h.audit.queues == [] and h.audit.orders == {}


@pytest.mark.parametrize(
    "body",
    [
        # About 10,000 levels: a RecursionError, and a 500, if the depth were not checked first.
        b'{"note": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
        b'{"note": "a", "note": "b"}',
    ],
)
async def test_deep_or_repeated_bodies_are_400_and_nothing_is_replayed_or_purged(
    h: Harness, body: bytes
) -> None:
    await h.tasks.submit("o-1", {"orderId": "o-1", **ORDER}, "hash")
    h.port.queues[AGENT_QUEUE] = [letter(7, "o-1")]
    for action in (h.api.replay, h.api.purge):
        reply = await action(AGENT_QUEUE, "7", Call(body, "application/json"))
        assert (reply.status, reply.body["error"]["code"]) == (400, "InvalidJson")
        assert "Error" not in reply.body["error"]["message"]
    assert len(h.port.queues[AGENT_QUEUE]) == 1 and h.port.sent == []
    assert h.audit.queues == [] and h.audit.orders == {}


def test_a_dead_lettered_body_nested_too_deep_names_no_order_and_does_not_fail_the_listing() -> None:
    assert order_id_of(b'{"orderId": "o-1"}') == "o-1"
    assert order_id_of(b'{"orderId": "o-1", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}") is None
