"""OrdersApi in-process, on the real engine over in-memory ports: status codes and error bodies."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.backfill import BackfillPage, Backfills, Progress
from engine.clock import ManualClock
from engine.errors import ConcurrencyError, InvalidState, NotFound, NotUnderstood
from engine.operator_actions import CANCEL, EXTEND, RESUBMIT, RETRY, SKIP, UPDATE
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.state import ProcessState, StepStatus, TaskState
from engine.tasks import TaskService
from engine.workflow import StepDefinition, Update, WorkflowCatalog, WorkflowDefinition
from orders import release
from orders.api import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    Call,
    InvalidJson,
    OrdersApi,
    Reply,
    engine_error,
    parse_json,
)
from orders.inputs import FulfilmentOrder
from tests.engine.fakes import MemoryStore, RecordingSender

pytestmark = pytest.mark.anyio

ORDER = {"customerId": "c-1", "items": [{"sku": "a", "quantity": 2, "unitPrice": 1.5}], "currency": "EUR"}
JSON = "application/json"
BASE = "http://example.test"
# A workflow of the tests' own: the API serves whatever the catalog declares.
WORKFLOW = WorkflowDefinition(
    name="w",
    input=FulfilmentOrder,
    steps=(
        StepDefinition(name="first", agent="alpha", action="do", compensation="undo"),
        StepDefinition(name="second", agent="beta", action="do", compensation="undo"),
    ),
)
FIRST, SECOND = (step.name for step in WORKFLOW.steps)


class Refill(BaseModel):
    """A second workflow's input: nothing like an order's."""

    model_config = ConfigDict(extra="forbid")
    tank: str
    litres: int = Field(gt=0)
    urgent: bool = False


REFILL = WorkflowDefinition(
    name="refill", input=Refill, steps=(StepDefinition(name="pump", agent="alpha", action="do"),)
)


class Delivery(BaseModel):
    """A third workflow's input, whose address may change until the shipment starts."""

    model_config = ConfigDict(extra="forbid")
    parcel: str
    address: str = Field(min_length=5)


DELIVERY = WorkflowDefinition(
    name="delivery",
    input=Delivery,
    steps=(
        StepDefinition(name="label", agent="alpha", action="do", compensation="undo"),
        StepDefinition(name="ship", agent="beta", action="do", compensation="undo"),
    ),
    updates=(Update(fields=("address",), until="ship"),),
)


class Harness:
    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store or MemoryStore()
        self.sender = RecordingSender()
        catalog = WorkflowCatalog.of(WORKFLOW, REFILL, DELIVERY)
        parts = EngineParts(catalog, self.store, self.sender, ManualClock(), EngineSettings())
        self.tasks = TaskService(parts)
        self.api = OrdersApi(self._tasks, BASE)

    async def _tasks(self) -> TaskService:
        return self.tasks

    async def submit(self, body: Any = None, content_type: str = JSON) -> Reply:
        raw = body if isinstance(body, bytes) else json.dumps(ORDER if body is None else body).encode()
        return await self.api.submit(raw, content_type)


def code(reply: Reply) -> tuple[int, str]:
    return reply.status, reply.body["error"]["code"]


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_submit_accepts_an_order_and_points_at_its_status(h: Harness) -> None:
    reply = await h.submit({**ORDER, "orderId": "o-1"})
    assert reply.status == 202 and reply.body["processState"] == "Pending"
    # From the configured base URL (PUBLIC_BASE_URL): the request's Host never reaches the API.
    assert reply.headers["Location"] == reply.body["statusUrl"] == f"{BASE}/api/orders/o-1"
    stored = h.store.state("o-1").input
    # Stored as the workflow's input model dumps it: camelCase, defaults filled in.
    items = [{**item, "digital": False} for item in ORDER["items"]]
    # The model's computed fields too (what a condition may read): the order's total.
    assert stored == {"orderId": "o-1", **ORDER, "items": items, "total": 3.0}


async def test_each_workflow_validates_its_own_input_and_names_the_field(h: Harness) -> None:
    reply = await h.submit({"orderId": "r-1", "workflow": "refill", "tank": "t-4", "litres": 30})
    assert reply.status == 202
    assert h.store.state("r-1").input == {"orderId": "r-1", "tank": "t-4", "litres": 30, "urgent": False}
    for body, field in (
        ({"workflow": "refill", **ORDER}, "customerId"),  # another workflow's input
        ({"workflow": "refill", "tank": "t-4", "litres": 0}, "litres"),
        ({**ORDER, "tank": "t-4"}, "tank"),  # a field the default workflow does not declare
    ):
        reply = await h.submit(body)
        assert code(reply) == (400, "ValidationFailed")
        assert field in [d["field"] for d in reply.body["error"]["details"]], reply.body
        assert reply.body["error"]["message"].endswith("input"), reply.body
    reply = await h.submit({**ORDER, "workflow": "nothing"})
    assert (
        code(reply) == (400, "ValidationFailed") and reply.body["error"]["details"][0]["field"] == "workflow"
    )
    assert list(h.store.records) == ["r-1"]


async def test_without_a_public_base_url_the_status_url_is_relative() -> None:
    h = Harness()
    h.api = OrdersApi(h._tasks)
    reply = await h.submit({**ORDER, "orderId": "o-1"})
    assert reply.headers["Location"] == reply.body["statusUrl"] == "/api/orders/o-1"
    assert OrdersApi(h._tasks, "https://orders.example.com/").status_url("o-2") == (
        "https://orders.example.com/api/orders/o-2"
    )


async def test_submit_generates_an_id_when_none_is_given(h: Harness) -> None:
    reply = await h.submit()
    assert reply.status == 202 and h.store.state(reply.body["orderId"])


async def test_resubmitting_is_idempotent_and_another_body_conflicts(h: Harness) -> None:
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 202
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 200
    assert code(await h.submit({**ORDER, "orderId": "o-1", "currency": "USD"})) == (409, "Conflict")


async def test_a_retry_of_an_order_an_earlier_release_stored_is_a_retry(h: Harness) -> None:
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 202
    # As an earlier release stored it: its input model had no item default and derived no total, so its
    # stored body, and the hash of it, differ from what this release makes of the same request.
    record = h.store.state("o-1")
    record.input = {**record.input, "items": [dict(ORDER["items"][0])]}
    record.input.pop("total")
    record.input_hash = "hashed-by-an-earlier-release"
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 200
    # What the client did send still counts: another value, or a value the order never had.
    assert code(await h.submit({**ORDER, "orderId": "o-1", "currency": "USD"})) == (409, "Conflict")
    items = [{**ORDER["items"][0], "digital": True}]
    assert code(await h.submit({**ORDER, "orderId": "o-1", "items": items})) == (409, "Conflict")
    assert code(await h.submit({**ORDER, "orderId": "o-1", "items": ORDER["items"] * 2})) == (409, "Conflict")


async def test_an_order_purged_after_the_retention_period_refuses_its_id_while_its_tombstone_lasts(
    h: Harness,
) -> None:
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 202
    h.store.history["o-1"] = h.store.records.pop("o-1")[1]  # finished and moved, then purged:
    assert (await h.submit({**ORDER, "orderId": "o-1"})).status == 200  # still the same order
    del h.store.history["o-1"]
    h.store.tombstones["o-1"] = h.tasks.parts.clock.now()
    h.sender.sent.clear()
    for body in ({**ORDER, "orderId": "o-1"}, {**ORDER, "orderId": "o-1", "currency": "USD"}):
        reply = await h.submit(body)
        assert code(reply) == (409, "Purged") and "retention period" in reply.body["error"]["message"]
    assert h.store.records == {} and h.sender.sent == []
    assert code(await h.api.get("o-1")) == (404, "NotFound")


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (None, "text/plain", (415, "UnsupportedMediaType")),
        (b"x" * (MAX_BODY_BYTES + 1), JSON, (413, "PayloadTooLarge")),
        (b"{not json", JSON, (400, "InvalidJson")),
        ([1, 2], JSON, (400, "ValidationFailed")),
        ({**ORDER, "items": []}, JSON, (400, "ValidationFailed")),
        ({**ORDER, "orderId": "bad id!"}, JSON, (400, "ValidationFailed")),
        # A price whose order total would not be a finite JSON number.
        (
            {**ORDER, "items": [{"sku": "a", "quantity": 1000, "unitPrice": 1e306}]},
            JSON,
            (400, "ValidationFailed"),
        ),
    ],
)
async def test_bad_submissions_are_refused_and_write_nothing(
    h: Harness, body: Any, content_type: str, expected: tuple[int, str]
) -> None:
    assert code(await h.submit(body, content_type)) == expected
    assert h.store.records == {} and h.sender.sent == []


# ---- parse_json, the one parser of every JSON body --------------------------------------------------------
# An error message names no exception: no class name such as RecursionError or JSONDecodeError.
EXCEPTION_NAME = re.compile(r"[A-Z][a-z]+(?:Error|Exception)\b")


def refusal(body: bytes) -> str:
    with pytest.raises(InvalidJson) as refused:
        parse_json(body)
    message = str(refused.value)
    assert not EXCEPTION_NAME.search(message), message
    return message


def nested(depth: int, opening: str = "[", closing: str = "]", inner: str = "") -> bytes:
    return (opening * depth + inner + closing * depth).encode()


def test_json_nested_about_ten_thousand_levels_is_refused_not_a_recursion_error() -> None:
    for body in (nested(10_000), nested(10_000, '{"a":', "}", "1"), nested(100_000)):
        assert f"deeper than {MAX_JSON_DEPTH} levels" in refusal(body)


def test_json_may_nest_up_to_the_limit_and_brackets_in_strings_do_not_nest() -> None:
    deepest: object = parse_json(nested(MAX_JSON_DEPTH))
    for _ in range(MAX_JSON_DEPTH - 1):
        assert isinstance(deepest, list)
        [deepest] = deepest
    assert deepest == []
    assert "deeper" in refusal(nested(MAX_JSON_DEPTH + 1))
    # Brackets and an escaped quote in a string: the string ends where the parser ends it.
    in_a_string = '{"note": "' + "[{" * 1000 + '\\" ]"}'
    assert parse_json(in_a_string.encode()) == {"note": "[{" * 1000 + '" ]'}


def test_an_unterminated_run_of_escaped_quotes_is_refused_in_linear_time() -> None:
    # Matching a string from each of its 30,000 quotes in turn: quadratic, about ten seconds.
    assert "Unterminated string" in refusal(b'["' + b'\\"' * 30_000)


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (b'{"orderId": "a", "orderId": "b"}', "orderId"),
        (b'{"items": [{"sku": "a", "quantity": 1, "quantity": 1000}]}', "quantity"),
        (b'[[{"x": {"y": {"z": 1, "z": 1}}}]]', "z"),  # the same value twice is refused too
    ],
)
def test_a_key_repeated_in_one_object_is_refused_at_any_depth(body: bytes, key: str) -> None:
    assert refusal(body) == f'the key "{key}" appears more than once in one object'


def test_the_same_key_in_different_objects_is_fine() -> None:
    assert parse_json(b'[{"a": 1}, {"a": 2, "b": {"a": 3}}]') == [{"a": 1}, {"a": 2, "b": {"a": 3}}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the body is not valid JSON: Expecting property name enclosed in double quotes"),
        (b"\xff\xfe\xfd", "the body is not valid JSON: it is not UTF-8 text"),
        (b"1" * 5000, "the body is not valid JSON"),  # more digits than Python converts
    ],
)
def test_invalid_json_is_described_in_the_api_s_words(body: bytes, message: str) -> None:
    assert refusal(body).startswith(message)


def test_json_is_decoded_as_json_loads_decodes_bytes() -> None:
    for body in (b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"), b'{"a": 1}'):
        assert parse_json(body) == {"a": 1}


# ---- the API refuses such bodies, and writes nothing ---------------------------------------------------
async def test_a_deeply_nested_submission_is_400_and_writes_nothing(h: Harness) -> None:
    deep = b'{"orderId": "o-1", "customerId": ' + nested(10_000) + b"}"
    reply = await h.submit(deep)
    assert code(reply) == (400, "InvalidJson")
    assert not EXCEPTION_NAME.search(reply.body["error"]["message"])
    assert h.store.records == {} and h.sender.sent == []


async def test_a_submission_repeating_a_key_is_400_naming_it_and_writes_nothing(h: Harness) -> None:
    first = json.dumps({**ORDER, "orderId": "a"})
    twice = first[:-1] + ', "orderId": "b"}'
    reply = await h.submit(twice.encode())
    assert code(reply) == (400, "InvalidJson") and '"orderId"' in reply.body["error"]["message"]
    item = '{"sku": "a", "quantity": 1, "unitPrice": 1, "unitPrice": 2}'
    inner = json.dumps({**ORDER, "orderId": "c", "items": ["ITEM"]}).replace('"ITEM"', item)
    assert '"unitPrice"' in (await h.submit(inner.encode())).body["error"]["message"]
    assert h.store.records == {} and h.sender.sent == []


async def test_actions_refuse_deep_or_repeated_bodies_and_change_nothing(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    before = h.store.state("o-1").model_dump()
    h.sender.sent.clear()
    deep = b'{"note": ' + nested(10_000) + b"}"
    twice = b'{"seconds": 5, "note": "a", "note": "b"}'
    etag = {"if-match": read.headers["ETag"]}
    for body in (deep, twice):
        for action in (RESUBMIT, CANCEL):
            assert code(await h.api.act(action, "o-1", None, Call(body, JSON, etag))) == (400, "InvalidJson")
        for step_action in (RETRY, EXTEND, SKIP):
            assert code(await h.api.act(step_action, "o-1", FIRST, Call(body, JSON, etag))) == (
                400,
                "InvalidJson",
            )
    assert h.store.state("o-1").model_dump() == before and not await h.store.audit("o-1")
    assert h.sender.sent == []


async def test_validation_errors_name_the_field(h: Harness) -> None:
    reply = await h.submit({**ORDER, "items": [{"sku": "a", "quantity": 0, "unitPrice": 1}]})
    assert [d["field"] for d in reply.body["error"]["details"]] == ["items.0.quantity"]


async def test_get_answers_the_order_or_404(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    reply = await h.api.get("o-1")
    assert reply.status == 200 and [s["name"] for s in reply.body["steps"]] == [
        s.name for s in WORKFLOW.steps
    ]
    assert code(await h.api.get("o-2")) == (404, "NotFound")
    assert code(await h.api.get("not/an/id")) == (404, "NotFound")


async def test_list_by_state_pages(h: Harness) -> None:
    for i in range(3):
        await h.submit({**ORDER, "orderId": f"o-{i}"})
    first = await h.api.list_by_state({"processState": "Pending", "pageSize": "2"})
    assert first.status == 200 and len(first.body["items"]) == 2
    rest = await h.api.list_by_state(
        {"processState": "Pending", "pageSize": "2", "continuationToken": first.body["continuationToken"]}
    )
    assert len(rest.body["items"]) == 1 and rest.body["continuationToken"] is None


async def test_counts_give_every_state_and_say_when_they_are_lower_bounds(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        await h.submit({**ORDER, "orderId": f"o-{i}"})
    read = await h.api.get("o-0")
    await h.api.act(CANCEL, "o-0", None, guarded(read))
    counts = await h.api.counts()
    assert counts.status == 200 and counts.body["atLeast"] is False
    by_state = {i["processState"]: i["count"] for i in counts.body["items"]}
    assert by_state == {s.value: 0 for s in ProcessState} | {"Pending": 2, "Compensated": 1}
    monkeypatch.setattr("orders.api.COUNT_LIMIT", 2)
    capped = await h.api.counts()
    assert capped.body["atLeast"] is True and sum(i["count"] for i in capped.body["items"]) == 2


class _Progress:
    """The backfills' progress, in memory: enough for the API's answers."""

    shards = 1

    def __init__(self) -> None:
        self.kept: dict[str, Progress] = {}

    async def holds_tasks(self) -> bool:
        return True

    async def read_progress(self, name: str) -> Progress | None:
        return self.kept.get(name)

    async def write_progress(self, progress: Progress) -> Progress | None:
        self.kept[progress.name] = progress.model_copy(update={"etag": str(len(self.kept))})
        return self.kept[progress.name]


class _OnePage:
    name = "listing-entries"
    answers = frozenset({"listing"})

    async def page(self, shard: int, continuation: str | None, size: int) -> BackfillPage:
        return BackfillPage(read=0, changed=0, skipped=0, continuation=None)


async def test_listings_and_counts_say_which_backfill_they_wait_for_until_it_has_finished(h: Harness) -> None:
    backfills = Backfills([_OnePage()], _Progress())
    h.tasks = TaskService(replace(h.tasks.parts, backfills=backfills))
    await backfills.refresh(h.tasks.parts.clock.now())
    listing = await h.api.list_by_state({"processState": "Pending"})
    counts = await h.api.counts()
    assert listing.body["backfilling"] == counts.body["backfilling"] == ["listing-entries"]
    await backfills.advance(h.tasks.parts.clock.now())
    listing = await h.api.list_by_state({"processState": "Pending"})
    counts = await h.api.counts()
    assert listing.body["backfilling"] == counts.body["backfilling"] == []


@pytest.mark.parametrize(
    "query",
    [
        {"processState": "Lost"},
        {"processState": "Pending", "pageSize": "0"},
        {"processState": "Pending", "pageSize": "many"},
        {"processState": "Pending", "pageSize": "101"},
        {"processState": "Pending", "continuationToken": "not-a-token!"},
    ],
)
async def test_list_by_state_refuses_bad_queries(h: Harness, query: dict[str, str]) -> None:
    assert code(await h.api.list_by_state(query)) == (400, "ValidationFailed")


class CorruptStore(MemoryStore):
    """A store holding an entity that no longer validates (written by a broken release, say)."""

    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Any:
        TaskState.model_validate({"OrderID": "o-1", "ProcessState": "Nonsense"})


async def test_a_corrupt_stored_record_is_a_server_fault_not_a_bad_request() -> None:
    h = Harness(CorruptStore())
    with pytest.raises(ValidationError):  # the host answers 500
        await h.api.list_by_state({"processState": "Pending"})


def guarded(reply: Reply, body: Any = None, **headers: str) -> Call:
    """A call carrying the ETag of ``reply`` (a GET) in If-Match."""
    raw = b"" if body is None else json.dumps(body).encode()
    return Call(raw, JSON if body is not None else None, {"if-match": reply.headers["ETag"], **headers})


async def test_resubmit_and_cancel_follow_the_state_machine(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    resubmit = await h.api.act(RESUBMIT, "o-1", None, guarded(read))
    assert code(resubmit) == (409, "InvalidState")
    assert resubmit.body["error"]["message"] == "order o-1 is Pending; this needs Error"
    cancelled = await h.api.act(CANCEL, "o-1", None, guarded(read))
    assert cancelled.status == 202 and cancelled.body["processState"] == "Compensated"
    assert cancelled.headers["ETag"] != read.headers["ETag"]
    assert code(await h.api.act(CANCEL, "o-1", None, guarded(cancelled))) == (409, "InvalidState")
    assert code(await h.api.act(CANCEL, "o-2", None, guarded(read))) == (404, "NotFound")
    assert code(await h.api.act(RESUBMIT, "bad id", None, guarded(read))) == (404, "NotFound")


async def test_an_update_is_etag_guarded_audited_validated_and_fenced_by_the_step_that_reads_it(
    h: Harness,
) -> None:
    await h.submit({"workflow": "delivery", "orderId": "o-1", "parcel": "p", "address": "1 Main St"})
    read = await h.api.get("o-1")
    assert read.body["updatable"] == [{"fields": ["address"], "until": "ship"}]
    before = h.store.state("o-1").model_dump()
    refused = {
        "weight": (400, "cannot change parcel (it may change: address)", {"parcel": "q"}),
        "short": (400, "address: String should have at least 5 characters", {"address": "x"}),
        "empty": (400, "input", {}),
    }
    for name, (status, text, changes) in refused.items():
        answer = await h.api.act(UPDATE, "o-1", None, guarded(read, {"input": changes}))
        assert answer.status == status and text in json.dumps(answer.body), (name, answer.body)
    assert h.store.state("o-1").model_dump() == before and not await h.store.audit("o-1")
    moved = {"input": {"address": "2 High St"}, "note": "the customer moved"}
    updated = await h.api.act(UPDATE, "o-1", None, guarded(read, moved))
    assert updated.status == 202 and updated.body["input"]["address"] == "2 High St"
    stale = await h.api.act(UPDATE, "o-1", None, guarded(read, {"input": {"address": "3 Low St"}}))
    assert code(stale) == (412, "PreconditionFailed")
    (entry,) = (await h.api.audit("o-1")).body["items"]
    assert (entry["action"], entry["note"]) == ("update", "the customer moved")
    assert json.loads(entry["detail"]) == {"address": {"before": "1 Main St", "after": "2 High St"}}
    assert (await h.store.load("o-1")).input["address"] == "2 High St"
    record = await h.store.load("o-1")
    record.steps[1].status = StepStatus.RUNNING  # the shipment has started: it read the address
    await h.store.save(record)
    fenced = await h.api.act(
        UPDATE, "o-1", None, guarded(await h.api.get("o-1"), {"input": {"address": "4 Ln"}})
    )
    assert code(fenced) == (409, "InvalidState"), fenced.body
    assert (
        "address can no longer change: step ship, which reads it, is Running"
        in fenced.body["error"]["message"]
    )
    assert (await h.api.get("o-1")).body["updatable"] == []


async def test_get_returns_the_version_as_an_etag_that_changes_with_the_order(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    first = await h.api.get("o-1")
    assert first.headers["ETag"].startswith('"') and first.headers["ETag"].endswith('"')
    assert (await h.api.get("o-1")).headers["ETag"] == first.headers["ETag"]
    await h.tasks.cancel("o-1")
    assert (await h.api.get("o-1")).headers["ETag"] != first.headers["ETag"]


async def test_actions_need_if_match_and_a_stale_etag_changes_nothing(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    before = h.store.state("o-1").model_dump()
    for action in (RESUBMIT, CANCEL):
        assert code(await h.api.act(action, "o-1", None, Call())) == (428, "PreconditionRequired")
        assert code(await h.api.act(action, "o-1", None, Call(headers={"if-match": "*"}))) == (
            428,
            "PreconditionRequired",
        )
        assert code(await h.api.act(action, "o-1", None, Call(headers={"if-match": '"stale"'}))) == (
            412,
            "PreconditionFailed",
        )
    bodies = ((RETRY, {}), (EXTEND, {"seconds": 5}), (SKIP, {"note": "n"}))
    for step_action, body in bodies:
        no_tag = Call(json.dumps(body).encode(), JSON)
        assert code(await h.api.act(step_action, "o-1", SECOND, no_tag)) == (428, "PreconditionRequired")
    assert h.store.state("o-1").model_dump() == before and not await h.store.audit("o-1")
    listed = Call(headers={"if-match": f'"other", {read.headers["ETag"]}'})
    assert (await h.api.act(CANCEL, "o-1", None, listed)).status == 202  # any of the listed tags may match


async def test_weak_tags_alone_fail_the_precondition_rather_than_miss_it(h: Harness) -> None:
    """Under If-Match's strong comparison a weak tag never matches (RFC 9110 13.1.1): 412, not 428."""
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    before = h.store.state("o-1").model_dump()
    weak_current = "W/" + read.headers["ETag"]
    for tags in ('W/"x"', weak_current, f'W/"x", {weak_current}'):
        for action in (RESUBMIT, CANCEL):
            refused = await h.api.act(action, "o-1", None, Call(headers={"if-match": tags}))
            assert code(refused) == (412, "PreconditionFailed"), tags
    step = await h.api.act(RETRY, "o-1", FIRST, Call(headers={"if-match": weak_current}))
    assert code(step) == (412, "PreconditionFailed")
    assert h.store.state("o-1").model_dump() == before and not await h.store.audit("o-1")
    # A weak tag beside the current strong one does not stop the strong one from matching.
    mixed = Call(headers={"if-match": f"{weak_current}, {read.headers['ETag']}"})
    assert (await h.api.act(CANCEL, "o-1", None, mixed)).status == 202


async def test_step_actions_validate_their_bodies_and_name_real_steps(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    bad = [
        (EXTEND, None, (400, "InvalidJson")),
        (EXTEND, {}, (400, "ValidationFailed")),
        (EXTEND, {"seconds": 0}, (400, "ValidationFailed")),
        (EXTEND, {"seconds": "5"}, (400, "ValidationFailed")),
        (EXTEND, {"seconds": 86_401}, (400, "ValidationFailed")),
        (SKIP, {}, (400, "ValidationFailed")),
        (SKIP, {"note": ""}, (400, "ValidationFailed")),
        (RETRY, {"note": "x", "extra": 1}, (400, "ValidationFailed")),
    ]
    for action, body, expected in bad:
        call = (
            guarded(read, body) if body is not None else Call(b"", JSON, {"if-match": read.headers["ETag"]})
        )
        assert code(await h.api.act(action, "o-1", FIRST, call)) == expected, (action, body)
    text = Call(b"seconds=5", "text/plain", {"if-match": read.headers["ETag"]})
    assert code(await h.api.act(EXTEND, "o-1", FIRST, text)) == (415, "UnsupportedMediaType")
    unknown = await h.api.act(RETRY, "o-1", "nope", guarded(read))
    assert code(unknown) == (404, "NotFound") and FIRST in unknown.body["error"]["message"]
    wrong = await h.api.act(EXTEND, "o-1", FIRST, guarded(read, {"seconds": 5}))
    assert code(wrong) == (409, "InvalidState")
    assert h.store.state("o-1").state.process_state is ProcessState.PENDING


async def test_skip_is_audited_with_the_caller_and_the_note(h: Harness) -> None:
    await h.submit({**ORDER, "orderId": "o-1"})
    read = await h.api.get("o-1")
    skipped = await h.api.act(
        SKIP,
        "o-1",
        FIRST,
        replace(guarded(read, {"note": "reserved by phone"}), actor="user:ann oid:0001"),
    )
    assert skipped.status == 202 and skipped.body["steps"][0]["state"] == "Completed"
    trail = await h.api.audit("o-1")
    assert trail.status == 200
    [entry] = trail.body["items"]
    assert entry["actor"] == "user:ann oid:0001" and entry["action"] == "skip"
    assert entry["note"] == "reserved by phone"
    assert (entry["processStateBefore"], entry["processStateAfter"]) == ("Pending", "Pending")
    assert (entry["stepStateBefore"], entry["stepStateAfter"]) == ("NotStarted", "Completed")
    assert code(await h.api.audit("o-2")) == (404, "NotFound")
    assert code(await h.api.audit("bad id")) == (404, "NotFound")


async def test_engine_errors_map_in_one_place_and_faults_are_raised_on() -> None:
    assert code(engine_error(NotFound("o-1"))) == (404, "NotFound")
    refused = engine_error(InvalidState("o-1", "Processed", ["Error"]))
    assert refused.body == {
        "error": {"code": "InvalidState", "message": "order o-1 is Processed; this needs Error"}
    }
    with pytest.raises(ConcurrencyError):
        engine_error(ConcurrencyError("o-1"))
    # An order a later release stored (or one this release cannot read) is answered, never a 5xx.
    later = engine_error(NotUnderstood("its record is stored in format 2", "o-1"))
    assert code(later) == (409, "NotUnderstood") and "format 2" in later.body["error"]["message"]


async def test_health() -> None:
    assert OrdersApi.health() == Reply(200, {"status": "ok", "version": release.VERSION})
