"""The notifications service: sends an order's confirmation, or a return's notice, to the customer. A
message sent cannot be unsent, so its resources declare no undo: a later failure or a cancel never undoes
it."""

from __future__ import annotations

from typing import Any, Self

from .declaration import Document, NonEmpty, Resource, ServiceBody, ServiceDefinition


class ReturnNoticeBody(ServiceBody):
    """A return's notice: to whom, and how many items came back and are being settled."""

    customer_id: NonEmpty
    items: int

    @classmethod
    def build(cls, document: Document) -> Self:
        return cls.model_validate(cls.fields(document))

    @staticmethod
    def fields(document: Document) -> dict[str, Any]:
        """What every message to the customer says: the order, the customer, how many items."""
        return {
            "orderId": document.order_id,
            "customerId": document.input["customerId"],
            "items": sum(item["quantity"] for item in document.input["items"]),
        }


class ConfirmationBody(ReturnNoticeBody):
    """The confirmation: to whom, how many items, and the shipment's tracking number when there is a
    shipment (an order of digital goods only has none)."""

    may_use = ("trackingNumber",)

    tracking_number: str | None = None

    @classmethod
    def build(cls, document: Document) -> Self:
        return cls.model_validate(
            {**cls.fields(document), "trackingNumber": document.result("trackingNumber")}
        )


SERVICE = ServiceDefinition(
    name="notifications",
    description="Send order confirmations",
    resources=(
        Resource(
            collection="confirmations",
            apply="send",
            body=ConfirmationBody,
            applied="sent",
            rejection="no contact address",
        ),
        Resource(
            collection="return-notices",
            apply="notify-return",
            body=ReturnNoticeBody,
            applied="sent",
            rejection="no contact address",
        ),
    ),
)
