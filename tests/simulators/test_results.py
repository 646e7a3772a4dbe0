"""Results and undo bodies, on resources of the tests' own declared under a declared service's name: the
values an apply answers (the same on every replay, across a restart), the values each body carries as the
ledger records them, the undo body's model, and no undo route for an effect that cannot be undone.

The app runs in-process (httpx's ASGI transport) over a file ledger in the test's directory: these are the
app's rules, whatever the declared services are.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from starlette.applications import Starlette

from orders.services.declaration import NonEmpty, Resource, ServiceBody, ServiceDefinition, ServiceResult
from simulators.app import create_app
from simulators.ledger import LEDGER_FILE_NAME
from tests.simulators.helpers import SERVICE_IDS, assert_error

NAME = SERVICE_IDS[0]  # the ledger, the faults and the counters are per declared service


class Made(ServiceResult):
    """What making a thing returns."""

    thing_id: str
    batch: str


class ThingBody(ServiceBody):
    """The body of a thing to make."""

    size: int


class UnmakeBody(ServiceBody):
    """The undo of a thing names it, and why."""

    thing_id: NonEmpty
    reason: NonEmpty


class NoteBody(ServiceBody):
    """A note about a thing, which may name it."""

    thing_id: str | None = None


THINGS = Resource(
    collection="things",
    apply="make",
    undo="unmake",
    body=ThingBody,
    undo_body=UnmakeBody,
    result=Made,
    applied="made",
    undone="unmade",
    rejection="no room",
)
# A note, once sent, cannot be taken back: no undo.
NOTES = Resource(collection="notes", apply="note", body=NoteBody, applied="noted", rejection="no one to tell")
# Undone without an undo body: the client sends the order's id and the values its apply returned.
PLAIN = Resource(
    collection="plain",
    apply="put",
    undo="take",
    body=ServiceBody,
    result=Made,
    applied="put",
    undone="taken",
    rejection="no",
)
SERVICE = ServiceDefinition(name=NAME, description="a service of a test", resources=(THINGS, NOTES, PLAIN))
KEY = "o-1:make"
MADE = {"thingId": Made.simulated(KEY).thing_id, "batch": Made.simulated(KEY).batch}


def app(data_dir: Path) -> Starlette:
    """The simulators of SERVICE alone, with a ledger in ``data_dir``."""
    return create_app(data_dir, services=[SERVICE])


def calls(data_dir: Path, *requests: tuple[str, dict[str, Any] | None, str | None]) -> list[httpx.Response]:
    """POST ``(path, JSON body or None, Idempotency-Key or None)`` in turn to a fresh app on ``data_dir``."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app(data_dir))
        async with httpx.AsyncClient(transport=transport, base_url="http://simulators") as http:
            answers = []
            for path, body, key in requests:
                headers = {"Idempotency-Key": key} if key else {}
                answers.append(await http.post(path, json=body, headers=headers))
            return answers

    return asyncio.run(run())


def book(data_dir: Path) -> dict[str, dict[str, Any]]:
    """This service's ledger entries, as ``GET /ledger`` serves them."""

    async def run() -> dict[str, dict[str, Any]]:
        transport = httpx.ASGITransport(app=app(data_dir))
        async with httpx.AsyncClient(transport=transport, base_url="http://simulators") as http:
            entries: dict[str, dict[str, Any]] = (await http.get("/ledger")).json()[NAME]
            return entries

    return asyncio.run(run())


MAKE = (f"/{NAME}/things", {"orderId": "o-1", "size": 3}, KEY)


def test_an_apply_answers_its_declared_results_and_every_replay_the_same(tmp_path: Path) -> None:
    first, replay = calls(tmp_path, MAKE, MAKE)
    # After a restart, and with another body: the key decides the effect and its answer.
    (later,) = calls(tmp_path, (MAKE[0], {"orderId": "o-other", "size": 9}, KEY))

    assert (first.status_code, replay.status_code, later.status_code) == (201, 200, 200)
    assert first.json() == {**MADE, "id": KEY, "orderId": "o-1", "status": "made"}
    assert replay.json() == later.json() == first.json()
    # Values of another key differ: each effect has its own.
    (other,) = calls(tmp_path, (MAKE[0], {"orderId": "o-2", "size": 3}, "o-2:make"))
    assert other.json()["thingId"] != MADE["thingId"]
    assert book(tmp_path)[KEY]["result"] == MADE


def test_an_undo_body_is_validated_with_the_undo_body_model_and_what_it_carried_recorded(
    tmp_path: Path,
) -> None:
    undo = f"/{NAME}/things/{KEY}/unmake"
    missing, wrong_type, undone, again = calls(
        tmp_path,
        MAKE,
        (undo, {"orderId": "o-1", "reason": "cancelled"}, None),
        (undo, {"orderId": "o-1", "thingId": 7, "reason": "cancelled"}, None),
        (undo, {"orderId": "o-1", "thingId": MADE["thingId"], "reason": "cancelled"}, None),
        (undo, {"orderId": "o-1", "thingId": "another", "reason": "cancelled"}, None),
    )[1:]

    assert "thingId" in assert_error(missing, 400, "InvalidBody")
    assert_error(wrong_type, 400, "InvalidBody")
    assert undone.json() == again.json() == {"id": KEY, "status": "unmade"}
    entry = book(tmp_path)[KEY]
    # The body as received; the first undo that undid it is the one kept.
    kept = {"orderId": "o-1", "thingId": MADE["thingId"], "reason": "cancelled"}
    assert (entry["compensated"], entry["undoCarried"]) == (1, kept)
    assert entry["compensatedSeq"] > entry["appliedSeq"]


def test_an_undo_without_a_body_is_taken_as_older_callers_sent_it(tmp_path: Path) -> None:
    """An undo with no body at all is still an undo (callers before results existed sent none); a body
    that is not a JSON object naming the order is refused."""
    undo = f"/{NAME}/plain/o-1:put/take"
    put = (f"/{NAME}/plain", {"orderId": "o-1"}, "o-1:put")
    answers = calls(tmp_path, put, (undo, None, None))
    assert answers[1].json() == {"id": "o-1:put", "status": "taken"}
    assert book(tmp_path)["o-1:put"]["undoCarried"] == {}

    async def raw(content: bytes) -> httpx.Response:
        transport = httpx.ASGITransport(app=app(tmp_path))
        async with httpx.AsyncClient(transport=transport, base_url="http://simulators") as http:
            return await http.post(f"/{NAME}/plain/o-1:put/take", content=content)

    for content in (b"{", b"[]", b'{"orderId": ""}', b'{"chargeId": "x"}'):
        assert_error(asyncio.run(raw(content)), 400, "InvalidBody")


def test_an_undo_without_an_undo_body_model_carries_the_order_and_its_results(tmp_path: Path) -> None:
    put = (f"/{NAME}/plain", {"orderId": "o-1"}, "o-1:put")
    values = Made.simulated("o-1:put").model_dump(by_alias=True)
    answers = calls(tmp_path, put, (f"/{NAME}/plain/o-1:put/take", {"orderId": "o-1", **values}, None))
    assert answers[1].json() == {"id": "o-1:put", "status": "taken"}
    assert book(tmp_path)["o-1:put"]["undoCarried"] == {"orderId": "o-1", **values}


def test_what_an_apply_body_carries_under_a_result_name_is_recorded_as_received(tmp_path: Path) -> None:
    note = f"/{NAME}/notes"
    answers = calls(
        tmp_path,
        (note, {"orderId": "o-1", "thingId": MADE["thingId"], "size": 4}, "o-1:note"),
        (note, {"orderId": "o-2", "thingId": None}, "o-2:note"),
        (note, {"orderId": "o-3"}, "o-3:note"),
        # A replay carrying something else changes nothing: the first apply's record stands.
        (note, {"orderId": "o-1", "thingId": "other"}, "o-1:note"),
    )
    assert [answer.status_code for answer in answers] == [201, 201, 201, 200]
    # A resource that returns nothing answers its own fields alone.
    assert answers[0].json() == {"id": "o-1:note", "orderId": "o-1", "status": "noted"}
    entries = book(tmp_path)
    assert entries["o-1:note"]["carried"] == {"orderId": "o-1", "thingId": MADE["thingId"], "size": 4}
    assert entries["o-2:note"]["carried"] == {"orderId": "o-2", "thingId": None}
    assert entries["o-3:note"]["carried"] == {"orderId": "o-3"}
    assert entries["o-1:note"]["result"] == {}


@pytest.mark.parametrize("undo", ["unmake", "take", "undo", "cancel"])
def test_an_effect_that_cannot_be_undone_has_no_undo_route(tmp_path: Path, undo: str) -> None:
    note = f"/{NAME}/notes"
    answers = calls(
        tmp_path,
        (note, {"orderId": "o-1"}, "o-1:note"),
        (f"{note}/o-1:note/{undo}", None, None),
        (f"{note}/o-1:note/{undo}", {"orderId": "o-1"}, None),
    )
    assert answers[0].status_code == 201
    for answer in answers[1:]:
        assert_error(answer, 404, "NotFound")
    entry = book(tmp_path)["o-1:note"]
    assert (entry["applied"], entry["compensated"], entry["undoCarried"]) == (1, 0, None)


def test_an_entry_recorded_before_results_replays_the_values_the_key_gives(tmp_path: Path) -> None:
    """A ledger written by an earlier version holds no result: a replay answers what the key gives (the
    values depend on the key alone), and the entry reads with its unknown fields as null."""
    older = {"orderId": "o-1", "applied": 1, "compensated": 0}
    (tmp_path / LEDGER_FILE_NAME).write_text(
        json.dumps({"version": 2, "sequence": 4, "services": {NAME: {KEY: older}}})
    )
    (replay,) = calls(tmp_path, MAKE)
    assert replay.status_code == 200
    assert replay.json() == {**MADE, "id": KEY, "orderId": "o-1", "status": "made"}
    assert book(tmp_path)[KEY] == {
        **older,
        "result": None,
        "carried": None,
        "undoCarried": None,
        "appliedSeq": None,
        "compensatedSeq": None,
        "traceIds": None,
    }


def test_only_declared_services_can_be_served() -> None:
    other = SERVICE.model_copy(update={"name": "-".join(SERVICE_IDS) + "-undeclared"})
    with pytest.raises(ValueError, match="not declared"):
        create_app(None, services=[other])


class Graded(ServiceResult):
    """A result of a few choices and a text: a later step's condition may read the choice."""

    tier: Literal["standard", "premium"]
    grade_id: str


def test_a_result_of_a_few_choices_is_one_of_them_the_same_per_key_and_each_comes_up() -> None:
    drawn = {key: Graded.simulated(key) for key in (f"o-{n}:grade" for n in range(32))}
    assert {key: Graded.simulated(key) for key in drawn} == drawn
    assert {graded.tier for graded in drawn.values()} == {"standard", "premium"}
    assert len({graded.grade_id for graded in drawn.values()}) == len(drawn)
