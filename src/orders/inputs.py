"""The input models of the example workflows: what an order of each carries in its POST body (less
``orderId`` and ``workflow``). Each is declared on its workflow in ``catalog.py``; the API validates a
submission with it, the API's document and the console show it, and the demo submits its examples."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints, computed_field

from engine import sensitive


def _whole(value: Any) -> Any:
    """JSON has one number type: 3.0 is the integer 3 (as JSON Schema says), but "3" and true are not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A JSON integer: strict (no strings, no booleans), but an integral number written as 3.0 counts.
WholeNumber = Annotated[int, BeforeValidator(_whole), Strict()]

MAX_UNIT_PRICE = 1_000_000_000.0
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]
CustomerId = Annotated[str, Field(min_length=1, max_length=128)]


class _Input(BaseModel):
    """camelCase on the wire; unknown fields refused (a misspelt field must not be silently dropped)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OrderItem(_Input):
    """One line of an order."""

    sku: str = Field(min_length=1, max_length=64)
    quantity: WholeNumber = Field(ge=1, le=1000)
    # Bounded so that an order's total (up to 100 lines of 1,000 units) stays a finite JSON number.
    unit_price: float = Field(alias="unitPrice", ge=0, le=MAX_UNIT_PRICE, allow_inf_nan=False, strict=True)
    digital: bool = Field(default=False, strict=True, description="delivered online: needs no shipment")


class FulfilmentOrder(_Input):
    """An order to fulfil: who buys what, in which currency."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "customerId": "customer-1",
                    "items": [
                        {"sku": "sku-1", "quantity": 2, "unitPrice": 9.5},
                        {"sku": "ebook-7", "quantity": 1, "unitPrice": 20, "digital": True},
                    ],
                    "currency": "EUR",
                    "paymentToken": "tok-4242-visa",
                },
                {
                    "customerId": "customer-2",
                    "items": [{"sku": "ebook-7", "quantity": 1, "unitPrice": 12, "digital": True}],
                    "currency": "EUR",
                },
                {
                    "customerId": "customer-3",
                    "items": [{"sku": "tv-65", "quantity": 1, "unitPrice": 1499}],
                    "currency": "EUR",
                },
            ]
        }
    )

    customer_id: CustomerId = Field(alias="customerId")
    items: list[OrderItem] = Field(min_length=1, max_length=100)
    currency: Currency
    payment_token: str | None = Field(
        default=None,
        alias="paymentToken",
        min_length=1,
        max_length=256,
        description="the card's token: sent with the charge; never shown (redacted in every read), sealed "
        "at rest and dropped once the charge is done",
        exclude_if=lambda value: value is None,  # an order without one stores nothing for it
        # Only the charge's body reads it (its refund names the charge by its id).
        json_schema_extra=sensitive(until="charge-payment"),
    )

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def total(self) -> float:
        """What the order costs, in its currency: stored with the input, so a condition can read it (a
        client cannot send it: the model refuses fields it does not declare as input)."""
        return round(sum(item.quantity * item.unit_price for item in self.items), 2)


class ReturnedItem(_Input):
    """One line of a return: what comes back, and what it was bought for."""

    sku: str = Field(min_length=1, max_length=64)
    quantity: WholeNumber = Field(ge=1, le=1000)
    unit_price: float = Field(alias="unitPrice", ge=0, le=MAX_UNIT_PRICE, allow_inf_nan=False, strict=True)


class ReturnOrder(_Input):
    """A return: the order the goods came with, the goods that come back, and why."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "originalOrderId": "order-1",
                    "customerId": "customer-1",
                    "items": [{"sku": "sku-1", "quantity": 1, "unitPrice": 9.5}],
                    "currency": "EUR",
                    "reason": "damaged in transit",
                }
            ]
        }
    )

    original_order_id: str = Field(alias="originalOrderId", pattern=r"^[A-Za-z0-9-]{1,64}$")
    customer_id: CustomerId = Field(alias="customerId")
    items: list[ReturnedItem] = Field(min_length=1, max_length=100)
    currency: Currency
    reason: str = Field(min_length=1, max_length=500)
