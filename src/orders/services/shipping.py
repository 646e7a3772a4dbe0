"""The shipping service: books an order's shipment, and the collection of a return from the customer."""

from __future__ import annotations

from .declaration import ItemsBody, Resource, ServiceDefinition, ServiceResult


class Shipment(ServiceResult):
    """What a shipment returns: the carrier's tracking number, which the confirmation carries."""

    tracking_number: str


SERVICE = ServiceDefinition(
    name="shipping",
    description="Create and cancel shipments; collect returns",
    resources=(
        Resource(
            collection="shipments",
            apply="create",
            undo="cancel",
            body=ItemsBody,
            result=Shipment,
            applied="created",
            undone="cancelled",
            rejection="address not deliverable",
        ),
        Resource(
            collection="collections",
            apply="collect",
            undo="cancel-collection",
            body=ItemsBody,
            applied="collected",
            undone="cancelled",
            rejection="nothing to collect at that address",
        ),
    ),
)
