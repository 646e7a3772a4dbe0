"""The order as the HTTP API accepts and returns it."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from engine.state import TaskRecord, TaskState

OrderId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,64}$")]


class OrderItem(BaseModel):
    """One line of an order."""

    model_config = ConfigDict(extra="forbid")

    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000, strict=True)
    unit_price: float = Field(alias="unitPrice", ge=0, allow_inf_nan=False, strict=True)


class OrderRequest(BaseModel):
    """The body of ``POST /api/orders``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    order_id: OrderId | None = Field(default=None, alias="orderId")
    customer_id: str = Field(alias="customerId", min_length=1, max_length=128)
    items: list[OrderItem] = Field(min_length=1, max_length=100)
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]

    def document(self, order_id: str) -> dict[str, Any]:
        """The order as stored and handed to the agents."""
        return {"orderId": order_id, **self.model_dump(by_alias=True, exclude={"order_id"})}


def body_hash(document: dict[str, Any]) -> str:
    """Identifies a body: the same order resubmitted with the same body hashes the same."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


def summary(state: TaskState) -> dict[str, Any]:
    """The order's task state as the API shows it."""
    return {
        "orderId": state.order_id,
        "processState": state.process_state.value,
        "failureCount": state.failure_count,
        "lockedBy": state.locked_by,
        "completeBy": _iso(state.complete_by),
        "createdAt": _iso(state.created_at),
        "updatedAt": _iso(state.updated_at),
        "lastError": state.last_error,
    }


def status_view(record: TaskRecord) -> dict[str, Any]:
    """``GET /api/orders/{orderId}``: the task state and every step."""
    view = summary(record.state)
    view["steps"] = [
        {
            "name": s.name,
            "state": s.status.value,
            "attempts": s.attempts,
            "compensationAttempts": s.compensation_attempts,
            "completeBy": _iso(s.complete_by),
            "lastError": s.last_error,
        }
        for s in record.steps
    ]
    return view
