"""Retention through the whole local stack: a finished order is moved to the history by the Supervisor,
purged by the clean-up's own timer once ORDER_RETENTION has passed, its id refused while its tombstone
lasts and free again after; the listings and counts follow it all the way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableServiceClient

from adapters.table_store import history_table_name, shard_of
from devhost import azurite
from tests.e2e.conftest import LocalStack, another_order, new_order, start_stack, stop_stack
from tests.support import wait_for

RETENTION_SECONDS = 20


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(
        tmp_path_factory.mktemp("retention"),
        workers=2,
        extra_env={"ORDER_RETENTION": f"PT{RETENTION_SECONDS}S"},
    )
    try:
        yield running
    finally:
        stop_stack(running)


def counts(stack: LocalStack) -> dict[str, int]:
    reply = stack.api.get("/api/order-counts")
    assert reply.status_code == 200, reply.text
    return {item["processState"]: item["count"] for item in reply.json()["items"]}


def kept_as(stack: LocalStack, order_id: str) -> str | None:
    """What the history table holds for the order: "archive", "tombstone", or None (the devhost's store:
    table ``orders``, 8 shards)."""
    connection = azurite.table_connection_string(stack.devhost.azurite_port)
    table = TableServiceClient.from_connection_string(connection).get_table_client(
        history_table_name("orders")
    )
    try:
        return str(table.get_entity(shard_of(order_id, 8), f"order|{order_id}")["Kind"])
    except ResourceNotFoundError:
        return None


def listed(stack: LocalStack, state: str) -> list[str]:
    ids: list[str] = []
    token = None
    while True:
        params: dict[str, Any] = {"processState": state, "pageSize": 100}
        if token:
            params["continuationToken"] = token
        page = stack.api.get("/api/orders", params=params).json()
        ids += [o["orderId"] for o in page["items"]]
        token = page["continuationToken"]
        if not token:
            return ids


def test_a_finished_order_is_kept_then_purged_and_its_id_refused_then_free(stack: LocalStack) -> None:
    order_id = stack.submit()
    assert stack.wait_terminal(order_id)["processState"] == "Processed"
    before = counts(stack)["Processed"]
    # The Supervisor moves it to the history once its watch entry comes due (a step's budget, 3 s here):
    # it reads, lists and counts the same.
    wait_for(lambda: kept_as(stack, order_id) == "archive", timeout=15, what="the move to the history")
    assert stack.order(order_id)["processState"] == "Processed"
    assert order_id in listed(stack, "Processed") and counts(stack)["Processed"] == before
    again = stack.api.post("/api/orders", json=new_order(order_id))
    assert again.status_code == 200 and again.json()["processState"] == "Processed"
    other = stack.api.post("/api/orders", json=another_order(order_id))
    assert other.status_code == 409 and other.json()["error"]["code"] == "Conflict"
    # Purged by the clean-up's timer once ORDER_RETENTION has passed since it finished.
    wait_for(
        lambda: stack.api.get(f"/api/orders/{order_id}").status_code == 404,
        timeout=RETENTION_SECONDS + 30,
        interval=0.5,
        what="the order to be purged",
    )
    assert kept_as(stack, order_id) == "tombstone"
    assert order_id not in listed(stack, "Processed") and counts(stack)["Processed"] < before
    refused = stack.api.post("/api/orders", json=new_order(order_id))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "Purged"
    # Its tombstone lasts as long again; then the id starts a new order.
    fresh = wait_for(
        lambda: (r := stack.api.post("/api/orders", json=new_order(order_id))).status_code == 202 and r,
        timeout=RETENTION_SECONDS + 30,
        interval=1,
        what="the tombstone to expire",
    )
    assert fresh.json()["processState"] == "Processing"  # a new order, claimed at its submission
    assert stack.wait_terminal(order_id)["processState"] == "Processed"
