"""The payment service: charges an order (refunded to undo it), and credits a return (reversed to undo it)."""

from __future__ import annotations

from .declaration import AmountBody, Resource, ServiceDefinition, ServiceResult


class Charge(ServiceResult):
    """What a charge returns: its id, which its refund names."""

    charge_id: str


class Credit(ServiceResult):
    """What a credit returns: its id, which its reversal names."""

    credit_id: str


SERVICE = ServiceDefinition(
    name="payment",
    description="Charge and refund; credit returns",
    resources=(
        Resource(
            collection="charges",
            apply="charge",
            undo="refund",
            body=AmountBody,
            result=Charge,
            applied="charged",
            undone="refunded",
            rejection="card declined",
            # A card payment may need the cardholder (3-D Secure): the provider answers later.
            asynchronous=True,
        ),
        Resource(
            collection="credits",
            apply="credit",
            undo="reverse-credit",
            body=AmountBody,
            result=Credit,
            applied="credited",
            undone="reversed",
            rejection="card cannot be credited",
        ),
    ),
)
