"""A sensitive input field (the payment token) through the real API, engine and Table Storage store on
Azurite: never answered by a read, sealed in every stored entity and message, opened only where the charge's
body is built, and gone from the store once the charge is done, with the charge's undo still working."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from azure.data.tables.aio import TableServiceClient

from adapters.table_store import TableStateStore
from engine import formats, queues, sealing
from engine.calls import REDACTED
from engine.clock import ManualClock
from engine.errors import PermanentError
from engine.messages import AgentReply, AgentRequest, ReplyOutcome, SchedulerCommand
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.state import ProcessState, StepState, TaskRecord, TaskState
from engine.tasks import TaskService
from engine.transitions import Context, new_record_state
from engine.workflow import WorkflowCatalog
from orders.api import OrdersApi, Reply
from orders.catalog import FULFILMENT_V1, SERVICES
from orders.models import body_hash, order_document, order_input
from orders.services.client import request_body
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

KEYS = sealing.Keyring(sealing.InputKey.generate("k2"), (sealing.InputKey.generate("k1"),))
WORKFLOW = FULFILMENT_V1  # reserve, charge (reads the token), ship (unless all digital), confirm
CHARGE = [s.name for s in WORKFLOW.steps].index("charge-payment")


def order(token: str) -> dict[str, Any]:
    return {
        "customerId": f"c-{uuid.uuid4().hex[:8]}",
        "items": [{"sku": "tv-65", "quantity": 1, "unitPrice": 10}],
        "currency": "EUR",
        "paymentToken": token,
    }


@dataclass
class Harness:
    store: TableStateStore
    service: TableServiceClient
    names: tuple[str, ...]
    sender: RecordingSender
    scheduler: Scheduler
    api: OrdersApi
    transactions: list[str]

    async def stored_text(self) -> str:
        """Every entity of the store's tables, raw, as one text."""
        texts = []
        for name in self.names:
            async with self.service.get_table_client(name) as table:
                texts += [json.dumps(dict(e), default=str) async for e in table.list_entities()]
        return "\n".join(texts)

    async def input_entity(self, order_id: str) -> dict[str, Any]:
        """The order's live input entity, raw."""
        async with self.service.get_table_client(self.names[0]) as table:
            async for e in table.list_entities():
                if e.get("Kind") == "input" and e.get("OrderID") == order_id:
                    return dict(e)
        raise AssertionError(f"no input entity for {order_id}")

    async def raw_input(self, order_id: str) -> dict[str, Any]:
        """The order's input as its live entity holds it."""
        e = await self.input_entity(order_id)
        return dict(json.loads("".join(e[f"Body{i}"] for i in range(e["BodyChunks"]))))

    async def run(self, outcome: Callable[[AgentRequest], tuple[ReplyOutcome, dict[str, Any]]]) -> list[str]:
        """Deliver what was sent until nothing is: commands to the Scheduler, requests answered by
        ``outcome`` (on the way: no message carries the token in clear). The steps called, in order."""
        called = []
        while self.sender.sent:
            sent = self.sender.take()
            for message in sent:
                text = message.body.model_dump_json(by_alias=True)
                assert "tok-" not in text, f"a message to {message.queue} carries the token in clear"
                if isinstance(message.body, SchedulerCommand):
                    await self.scheduler.handle_command(message.body)
                elif isinstance(message.body, AgentRequest):
                    request = message.body
                    called.append(("undo " if request.compensating else "") + request.step)
                    state, result = outcome(request)
                    reply = AgentReply(
                        order_id=request.order_id,
                        step_index=request.step_index,
                        attempt=request.attempt,
                        compensating=request.compensating,
                        outcome=state,
                        result=result,
                        saved_task=request.saved_task,
                    )
                    await self.scheduler.handle_reply(reply)
        return called


@pytest.fixture
async def h(azurite_connection_string: str) -> AsyncIterator[Harness]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        name = "t" + uuid.uuid4().hex[:16]
        store = await TableStateStore.from_service(service, name, shards=2)
        names = (name, store.watch.table_name, store._history().table_name)
        names += (store.search.table_name,) if store.search is not None else ()
        transactions: list[str] = []
        original = store._transaction

        async def counted(table: Any, operations: list[Any]) -> list[Any]:
            transactions.append(table.table_name)
            from adapters.table_batch import submit_transaction

            return await (original or submit_transaction)(table, operations)

        store._transaction = counted
        sender = RecordingSender()
        parts = EngineParts(
            WorkflowCatalog.of(WORKFLOW), store, sender, ManualClock(), EngineSettings(input_keys=KEYS)
        )
        store.formats = parts.formats  # as the runtime wires them: one switch
        tasks = TaskService(parts)

        async def get_tasks() -> TaskService:
            return tasks

        yield Harness(
            store, service, names, sender, Scheduler(parts, "s-1"), OrdersApi(get_tasks), transactions
        )
        await store.close()


def charged_with(seen: dict[str, Any]) -> Callable[[AgentRequest], tuple[ReplyOutcome, dict[str, Any]]]:
    """Answer every call as its service would: the charge's body built as the Agent builds it (noted in
    ``seen``), the shipment refused, so the order is undone."""
    payment = next(s for s in SERVICES if s.name == "payment")
    charges, _ = payment.resource("charge")

    def outcome(request: AgentRequest) -> tuple[ReplyOutcome, dict[str, Any]]:
        if request.step == "charge-payment":
            seen.setdefault("bodies", []).append(
                request_body("payment", charges, request.compensating, request, KEYS)
            )
            return ReplyOutcome.SUCCEEDED, {} if request.compensating else {"chargeId": "ch-1"}
        if request.step == "create-shipment" and not request.compensating:
            return ReplyOutcome.FAILED, {}
        return ReplyOutcome.SUCCEEDED, {}

    return outcome


def shows(reply: Reply, token: str) -> bool:
    return token in json.dumps(reply.body)


async def test_the_token_is_sealed_never_read_back_and_dropped_once_the_charge_is_done(h: Harness) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    body = order(token)
    submitted = await h.api.submit(json.dumps({"orderId": "o-1", **body}).encode(), "application/json")
    assert submitted.status == 202, submitted.body
    stored = await h.raw_input("o-1")
    assert sealing.is_sealed(stored["paymentToken"]) and stored["paymentToken"].startswith("sealed:v1:k2:")
    assert token not in await h.stored_text(), "an entity holds the token in clear"

    # Every read: the order, a search for it, its audit trail.
    got = await h.api.get("o-1")
    assert got.body["input"]["paymentToken"] == REDACTED and not shows(got, token)
    found = await h.api.list_by_state({"customerId": body["customerId"]})
    assert [o["orderId"] for o in found.body["items"]] == ["o-1"] and not shows(found, token)

    seen: dict[str, Any] = {}
    outcome = charged_with(seen)
    called = await h.run(outcome)
    # The charge's call got the token itself; its refund, built without it, still undid it.
    assert seen["bodies"][0]["paymentToken"] == token and "paymentToken" not in seen["bodies"][1]
    assert seen["bodies"][1]["chargeId"] == "ch-1"
    assert called == [
        "reserve-inventory",
        "charge-payment",
        "create-shipment",
        "undo create-shipment",  # refused, it may still have had an effect
        "undo charge-payment",
        "undo reserve-inventory",
    ]
    got = await h.api.get("o-1")
    assert got.body["processState"] == ProcessState.COMPENSATED.value
    assert "paymentToken" not in got.body["input"] and not shows(got, token)
    audit = await h.api.audit("o-1")
    assert audit.status == 200 and not shows(audit, token)
    text = await h.stored_text()
    assert token not in text and "sealed:v1:" not in text, "the token, even sealed, outlived the charge"


async def test_the_save_that_completes_the_charge_drops_the_token_in_its_own_transaction(h: Harness) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    await h.api.submit(json.dumps({"orderId": "o-2", **order(token)}).encode(), "application/json")
    command = h.sender.take(queues.SCHEDULER_QUEUE)[0].body
    await h.scheduler.handle_command(command)
    for step in ("reserve-inventory", "charge-payment"):
        (request,) = [s.body for s in h.sender.take() if isinstance(s.body, AgentRequest)]
        assert request.step == step
        assert sealing.is_sealed(request.payload["input"]["paymentToken"])  # the request carries it sealed
        h.transactions.clear()
        result = {"chargeId": "ch-2"} if step == "charge-payment" else {}
        reply = AgentReply(
            order_id="o-2",
            step_index=request.step_index,
            attempt=request.attempt,
            outcome=ReplyOutcome.SUCCEEDED,
            result=result,
            saved_task=request.saved_task,
        )
        await h.scheduler.handle_reply(reply)
        assert h.transactions == [h.names[0]], "one transaction saves the step (and drops the token)"
        held = "paymentToken" in await h.raw_input("o-2")
        assert held is (step == "reserve-inventory"), step
    # The next step's request carries no token at all.
    (request,) = [s.body for s in h.sender.take() if isinstance(s.body, AgentRequest)]
    assert "paymentToken" not in request.payload["input"]


def stored_order(order_id: str, document: dict[str, Any], input_hash: str) -> TaskRecord:
    """A new task of ``WORKFLOW`` as the store would hold it, with the input and body hash given (written
    as another release or key wrote them, not through today's submission)."""
    now = ManualClock().now()
    record = TaskRecord(
        state=TaskState(
            order_id=order_id,
            workflow=WORKFLOW.name,
            workflow_version=WORKFLOW.version,
            created_at=now,
            updated_at=now,
        ),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input=document,
        input_hash=input_hash,
    )
    new_record_state(record, Context(WORKFLOW, EngineSettings(), now))
    return record


async def test_an_order_stored_in_clear_by_the_previous_release_is_still_charged(h: Harness) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    document = order_document("o-3", order_input(WORKFLOW, order(token)))
    # As the previous release stored it: the token in clear.
    await h.store.create(stored_order("o-3", document, body_hash(document)))
    got = await h.api.get("o-3")
    assert got.body["input"]["paymentToken"] == REDACTED and not shows(got, token)
    await h.sender.send(
        queues.SCHEDULER_QUEUE,
        SchedulerCommand(order_id="o-3", kind="start"),
        message_id="m",
        correlation_id="o-3",
    )
    seen: dict[str, Any] = {}
    await h.run(charged_with(seen))
    assert seen["bodies"][0]["paymentToken"] == token
    assert token not in await h.stored_text(), "the token stored in clear outlived the charge"


@pytest.mark.parametrize("stored_by", ["the previous release, in clear", "a key since rotated"])
async def test_the_same_body_resubmitted_is_the_same_order_whatever_hashed_it(
    h: Harness, stored_by: str
) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    body = order(token)
    document = order_document("o-4", order_input(WORKFLOW, body))
    plain = body_hash(document)
    retired = sealing.Keyring(KEYS.previous[0])  # the key that sealed before the rotation (now previous)
    clear = stored_by.startswith("the previous")
    stored = document if clear else sealing.seal_input(document, WORKFLOW.sensitive, "o-4", retired)
    await h.store.create(stored_order("o-4", stored, plain if clear else retired.fingerprint(plain)))
    again = await h.api.submit(json.dumps({"orderId": "o-4", **body}).encode(), "application/json")
    assert again.status == 200, (stored_by, again.body)  # was 409: the hash compared under today's key only
    other = await h.api.submit(
        json.dumps({"orderId": "o-4", **body, "currency": "USD"}).encode(), "application/json"
    )
    assert other.status == 409, other.body


async def test_before_the_switch_the_token_is_kept_as_the_release_before_reads_it_and_sealed_after(
    h: Harness,
) -> None:
    formats_now = h.scheduler.parts.formats
    formats_now.writes = formats.BEFORE_SWITCH  # an upgrade under way: the release before still runs
    token = f"tok-{uuid.uuid4().hex}"
    body = order(token)
    submitted = await h.api.submit(json.dumps({"orderId": "o-5", **body}).encode(), "application/json")
    assert submitted.status == 202, submitted.body
    stored = await h.raw_input("o-5")
    assert stored["paymentToken"] == token  # what release 1.0.0 reads and charges with
    entity = await h.input_entity("o-5")
    plain = body_hash(order_document("o-5", order_input(WORKFLOW, body)))
    assert (entity["BodyHash"], entity["Format"]) == (plain, formats.BEFORE_SWITCH)
    # The switch flips: the order's next save seals the token and writes its records in the new format.
    formats_now.writes = formats.AFTER_SWITCH
    [start] = [m for m in h.sender.take() if isinstance(m.body, SchedulerCommand)]
    await h.scheduler.handle_command(start.body)
    stored = await h.raw_input("o-5")
    assert sealing.is_sealed(stored["paymentToken"]) and token not in await h.stored_text()
    assert (await h.input_entity("o-5"))["Format"] == formats.AFTER_SWITCH


def test_a_charge_whose_token_does_not_open_fails_for_good_saying_why() -> None:
    payment = next(s for s in SERVICES if s.name == "payment")
    charges, _ = payment.resource("charge")
    sealed = KEYS.seal("tok-5", "o-5", "paymentToken")
    document = order_document("o-5", {**order_input(WORKFLOW, order("tok-5")), "paymentToken": sealed})
    request = AgentRequest(
        order_id="o-5",
        step="charge-payment",
        step_index=CHARGE,
        attempt=1,
        action="charge",
        idempotency_key="o-5:charge-payment",
        complete_by=ManualClock().now(),
        payload={"input": document, "results": {}},
    )
    assert request_body("payment", charges, False, request, KEYS)["paymentToken"] == "tok-5"
    retired = sealing.Keyring(sealing.InputKey.generate("k3"))
    with pytest.raises(PermanentError, match="INPUT_ENCRYPTION_PREVIOUS_KEYS"):
        request_body("payment", charges, False, request, retired)
    moved = request.model_copy(update={"order_id": "o-6"})
    with pytest.raises(PermanentError, match="does not open"):
        request_body("payment", charges, False, moved, KEYS)
