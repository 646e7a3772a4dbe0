"""Clients of the three remote services, as the agents' actions.

Each action sends the step's idempotency key on every try, and classifies what comes back: a timeout,
a connection failure, 408, 429 or 5xx is transient (retry); any other 4xx is a lasting fault. A service
given a key (the simulators hosted in a Function App) also gets it as ``x-simulators-key``.

Calls go through one ``httpx.AsyncClient`` per event loop: a call waiting on a slow or hung service is a
suspended coroutine, not a blocked thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from engine.agent import Action
from engine.errors import PermanentError, TransientError
from engine.messages import AgentRequest

from .workflow import INVENTORY, PAYMENT, SHIPPING

_TRANSIENT_STATUS = {408, 429}
SIMULATORS_KEY_HEADER = "x-simulators-key"
CONNECTIONS = 300


def _order(request: AgentRequest) -> dict[str, Any]:
    return dict(request.payload.get("input") or {})


def _items(request: AgentRequest) -> list[dict[str, Any]]:
    return [{"sku": i["sku"], "quantity": i["quantity"]} for i in _order(request).get("items", [])]


class RemoteServices:
    """Builds the actions of each agent from the services' base URLs."""

    def __init__(
        self,
        urls: dict[str, str],
        client: httpx.AsyncClient | None = None,
        keys: dict[str, str] | None = None,
    ) -> None:
        self.urls = {name: url.rstrip("/") for name, url in urls.items()}
        self._keys = {name: key for name, key in (keys or {}).items() if key}
        # One pooled client per process (and event loop); the per-call timeout is set on each request.
        # The pool is as large as the calls one process may have in flight (maxConcurrentCalls per agent
        # function), so no call waits for a connection while its complete-by runs.
        self.client = client or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        )

    async def _call(
        self, agent: str, path: str, request: AgentRequest, timeout: float, body: dict[str, Any]
    ) -> dict[str, Any]:
        url = f"{self.urls[agent]}{path}"
        headers = {"Idempotency-Key": request.idempotency_key}
        if agent in self._keys:
            headers[SIMULATORS_KEY_HEADER] = self._keys[agent]
        try:
            content = json.dumps(body, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            # The request itself cannot be sent (e.g. a total too large for JSON): no retry can help and
            # it says nothing about the service, so it must fail the step, not charge the breaker.
            raise PermanentError(f"{agent}: the request cannot be encoded: {exc}") from exc
        headers["Content-Type"] = "application/json"
        try:
            response = await self.client.post(url, content=content, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise TransientError(f"{agent}: timed out after {timeout:.2f}s") from exc
        except httpx.TransportError as exc:
            raise TransientError(f"{agent}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500 or response.status_code in _TRANSIENT_STATUS:
            raise TransientError(f"{agent}: HTTP {response.status_code}")
        if response.status_code >= 400:
            raise PermanentError(f"{agent}: {_reason(response)}")
        try:
            return dict(response.json())
        except ValueError as exc:
            raise TransientError(f"{agent}: answer was not JSON") from exc

    def _action(
        self, agent: str, path: Callable[[AgentRequest], str], body: Callable[[AgentRequest], dict[str, Any]]
    ) -> Action:
        async def run(request: AgentRequest, timeout: float) -> dict[str, Any]:
            return await self._call(agent, path(request), request, timeout, body(request))

        return run

    def actions(self) -> dict[str, dict[str, Action]]:
        """Per agent, its actions by name (the names the workflow declares)."""

        def key(request: AgentRequest) -> str:
            return quote(request.idempotency_key, safe="")

        def order_ref(request: AgentRequest) -> dict[str, Any]:
            return {"orderId": request.order_id}

        return {
            INVENTORY: {
                "reserve": self._action(
                    INVENTORY,
                    lambda r: "/inventory/reservations",
                    lambda r: {"orderId": r.order_id, "items": _items(r)},
                ),
                "release": self._action(
                    INVENTORY, lambda r: f"/inventory/reservations/{key(r)}/release", order_ref
                ),
            },
            PAYMENT: {
                "charge": self._action(
                    PAYMENT,
                    lambda r: "/payment/charges",
                    lambda r: {
                        "orderId": r.order_id,
                        "amount": _total(r),
                        "currency": _order(r).get("currency"),
                    },
                ),
                "refund": self._action(PAYMENT, lambda r: f"/payment/charges/{key(r)}/refund", order_ref),
            },
            SHIPPING: {
                "create": self._action(
                    SHIPPING,
                    lambda r: "/shipping/shipments",
                    lambda r: {"orderId": r.order_id, "items": _items(r)},
                ),
                "cancel": self._action(SHIPPING, lambda r: f"/shipping/shipments/{key(r)}/cancel", order_ref),
            },
        }


def _total(request: AgentRequest) -> float:
    items = _order(request).get("items", [])
    return round(sum(i["quantity"] * i["unitPrice"] for i in items), 2)


def _reason(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or error.get("code") or f"HTTP {response.status_code}")
    except ValueError:
        return f"HTTP {response.status_code}"
