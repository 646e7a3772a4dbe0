"""The payment service: charges an order (refunded to undo it), and credits a return (reversed to undo it)."""

from __future__ import annotations

from .declaration import AmountBody, Resource, ServiceDefinition

SERVICE = ServiceDefinition(
    name="payment",
    description="Charge and refund; credit returns",
    resources=(
        Resource(
            collection="charges",
            apply="charge",
            undo="refund",
            body=AmountBody,
            applied="charged",
            undone="refunded",
            rejection="card declined",
        ),
        Resource(
            collection="credits",
            apply="credit",
            undo="reverse-credit",
            body=AmountBody,
            applied="credited",
            undone="reversed",
            rejection="card cannot be credited",
        ),
    ),
)
