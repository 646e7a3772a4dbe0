"""The inventory service: holds stock for an order, and takes returned goods back into stock."""

from __future__ import annotations

from .declaration import ItemsBody, Resource, ServiceDefinition

SERVICE = ServiceDefinition(
    name="inventory",
    description="Reserve and release stock; restock returned goods",
    resources=(
        Resource(
            collection="reservations",
            apply="reserve",
            undo="release",
            body=ItemsBody,
            applied="reserved",
            undone="released",
            rejection="insufficient stock",
        ),
        Resource(
            collection="restocks",
            apply="restock",
            undo="unstock",
            body=ItemsBody,
            applied="restocked",
            undone="unstocked",
            rejection="unknown SKU",
        ),
    ),
)
