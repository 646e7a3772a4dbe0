"""A sensitive input field through the whole local stack: the service gets it, and neither a read nor the
storage keeps it once the order is done (the devhost's own key seals it meanwhile)."""

from __future__ import annotations

import json
import uuid

import pytest
from azure.data.tables import TableServiceClient

from devhost import azurite
from devhost.stack import INPUT_KEY_FILE
from tests.e2e.conftest import DEFAULT_WORKFLOW, LocalStack

SENSITIVE = [name for name, until in DEFAULT_WORKFLOW.sensitive.items() if until is not None]
pytestmark = pytest.mark.skipif(not SENSITIVE, reason="the default workflow declares no sensitive field")


def stored_text(stack: LocalStack) -> str:
    """Every entity of the app's tables, raw (the simulators' own table aside: it is the service's)."""
    service = TableServiceClient.from_connection_string(
        azurite.table_connection_string(stack.devhost.azurite_port)
    )
    return "\n".join(
        json.dumps(dict(entity), default=str)
        for table in service.list_tables()
        if table.name.startswith("orders") and table.name != "orderssim"
        for entity in service.get_table_client(table.name).list_entities()
    )


def test_the_service_gets_the_token_and_nothing_keeps_or_shows_it_once_done(stack: LocalStack) -> None:
    (field,) = SENSITIVE[:1]
    token = f"tok-{uuid.uuid4().hex}"
    order_id = stack.submit(**{field: token})
    order = stack.wait_terminal(order_id)
    assert order["processState"] == "Processed"
    assert field not in order["input"], "dropped once its step was done"
    entries = stack.step_entries(order_id)
    assert any((entry.get("carried") or {}).get(field) == token for entry in entries.values() if entry)
    customer = order["input"].get("customerId")
    reads = [
        stack.api.get(f"/api/orders/{order_id}").text,
        stack.api.get(f"/api/orders/{order_id}/audit").text,
        stack.api.get("/api/orders", params={"customerId": customer}).text if customer else "",
    ]
    assert all(token not in text for text in reads)
    text = stored_text(stack)
    assert token not in text and "sealed:v1:" not in text
    assert (stack.data_dir / INPUT_KEY_FILE).stat().st_mode & 0o077 == 0, "the key is its owner's only"
