"""The HTTP client of every declared remote service, as the agents' actions.

Each action sends the step's idempotency key on every try, and classifies what comes back: a timeout,
a connection failure, 408, 429 or 5xx is transient (retry); any other 4xx is a lasting fault. A service
given a key (the simulators hosted in a Function App) also gets it as ``x-simulators-key``.

Calls go through one ``aiohttp.ClientSession`` per event loop, made on the first call: a call waiting on a
slow or hung service is a suspended coroutine, not a blocked thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import aiohttp
from opentelemetry.trace import SpanKind
from pydantic import ValidationError
from yarl import URL

from engine import (
    Accepted,
    Action,
    AgentRequest,
    Keyring,
    PermanentError,
    TransientError,
    callback_context,
    calls,
    sealing,
    tracing,
)

from .declaration import Document, Resource, ServiceDefinition

_TRANSIENT_STATUS = {408, 429}
SIMULATORS_KEY_HEADER = "x-simulators-key"
# Where a service that answers later sends the outcome, and what it sends back with it (orders.callbacks).
CALLBACK_URL_HEADER = "Callback-Url"
CALLBACK_CONTEXT_HEADER = "Callback-Context"
CONNECTIONS = 300


def callback_path(service: str) -> str:
    """The app's route a service that answers later sends its outcome to."""
    return f"/api/callbacks/{service}"


def apply_path(service: ServiceDefinition, resource: Resource) -> str:
    """Where an effect of ``resource`` is applied, under the service's base URL."""
    return f"/{service.name}/{resource.collection}"


def undo_path(service: ServiceDefinition, resource: Resource, key: str) -> str:
    """Where the effect applied with ``key`` is undone."""
    return f"{apply_path(service, resource)}/{quote(key, safe='')}/{resource.undo}"


class LazySession:
    """The one pooled ``aiohttp.ClientSession`` of a process's calls, made on first use: an aiohttp session
    must be made in the running event loop, and the services are built before any call is made."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self._session is None:
            # aiohttp rather than httpx: httpx took about 3.5x aiohttp's CPU per call here (0.70 against
            # 0.19 ms per POST to a local server, measured 2026-11-27), and the call is on every step's path.
            # The pool is as large as the calls one process may have in flight (maxConcurrentCalls per
            # agent function), so no call waits for a connection while its complete-by runs. Idle
            # connections are kept 5 s, as httpx kept them. Proxy settings and .netrc in the environment are
            # not read (trust_env off): aiohttp would read them again on every call, off the loop.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS, keepalive_timeout=5.0)
            )
        return self._session

    async def aclose(self) -> None:
        """Close the session, if one was made; the services make no call afterwards."""
        if self._session is not None:
            await self._session.close()


class RemoteServices:
    """Builds the actions of each service's agent from the declarations and the services' base URLs."""

    def __init__(
        self,
        services: Iterable[ServiceDefinition],
        urls: dict[str, str],
        keys: dict[str, str] | None = None,
        callback_base: str = "",
        input_keys: Keyring | None = None,
    ) -> None:
        self.services = {s.name: s for s in services}
        # The app's own address, for the callback URL of a service that answers later ("" relative).
        self.callback_base = callback_base.rstrip("/")
        self.urls = {name: url.rstrip("/") for name, url in urls.items()}
        self._keys = {name: key for name, key in (keys or {}).items() if key}
        # What opens the order's sealed input fields, as each body is built (engine.sealing).
        self._input_keys = input_keys
        # One pooled session per process (and event loop), closed by ``client.aclose()``; the per-call
        # timeout is set on each request.
        self.client = LazySession()

    async def _call(
        self,
        service: str,
        path: str,
        request: AgentRequest,
        timeout: float,
        body: dict[str, Any],
        asynchronous: bool = False,
        recorded: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """POST ``body``; ``recorded`` is the body as the call's record keeps it (sensitive fields
        redacted)."""
        url = f"{self.urls[service]}{path}"
        headers = {"Idempotency-Key": request.idempotency_key}
        if asynchronous:
            # The service may answer 202 and send the outcome here later, with this context in it.
            headers[CALLBACK_URL_HEADER] = f"{self.callback_base}{callback_path(service)}"
            headers[CALLBACK_CONTEXT_HEADER] = callback_context(request)
        if service in self._keys:
            headers[SIMULATORS_KEY_HEADER] = self._keys[service]
        try:
            content = json.dumps(body, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            # The request itself cannot be sent (e.g. a total too large for JSON): no retry can help and
            # it says nothing about the service, so it must fail the step, not charge the breaker.
            raise PermanentError(f"{service}: the request cannot be encoded: {exc}") from exc
        headers["Content-Type"] = "application/json"
        if recorded is not None:
            calls.note_body(recorded)
        # One client span per try, a child of the Agent's; the service gets its context in the header.
        with tracing.span(
            tracing.HTTP_CALL,
            SpanKind.CLIENT,
            attributes={tracing.SERVICE: service, "http.request.method": "POST", "url.full": url},
        ) as span:
            traceparent = tracing.traceparent(span)
            if traceparent:
                headers[tracing.TRACEPARENT] = traceparent
            try:
                # The whole answer is read in the request's context, so the connection goes back to the
                # pool; the timeout bounds the whole call. No redirect is followed, no status raises. The URL
                # is sent as built (encoded=True): yarl would otherwise unquote the key's escapes (%3A).
                async with self.client.get().post(
                    URL(url, encoded=True),
                    data=content,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                    allow_redirects=False,
                ) as response:
                    status = response.status
                    answer = await response.read()
            except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
                raise TransientError(f"{service}: timed out after {timeout:.2f}s") from exc
            except aiohttp.ClientError as exc:  # no status raises: a connection or protocol failure
                raise TransientError(f"{service}: {type(exc).__name__}: {exc}") from exc
            if span.is_recording():
                span.set_attribute("http.response.status_code", status)
                if status >= 400:
                    tracing.error(f"HTTP {status}")
        calls.note_status(status)
        if status >= 500 or status in _TRANSIENT_STATUS:
            raise TransientError(f"{service}: HTTP {status}")
        if status >= 400:
            raise PermanentError(f"{service}: {_reason(status, answer)}")
        if status == 202 and asynchronous:
            raise Accepted(service)
        try:
            return dict(json.loads(answer))
        except ValueError as exc:
            raise TransientError(f"{service}: answer was not JSON") from exc

    def _apply(self, service: ServiceDefinition, resource: Resource) -> Action:
        path = apply_path(service, resource)

        async def run(request: AgentRequest, timeout: float) -> dict[str, Any]:
            body = request_body(service.name, resource, False, request, self._input_keys)
            recorded = calls.redacted(body, resource.body.sensitive)
            answer = await self._call(
                service.name, path, request, timeout, body, resource.asynchronous, recorded
            )
            return declared_result(service, resource, answer)

        return run

    def _undo(self, service: ServiceDefinition, resource: Resource) -> Action:
        async def run(request: AgentRequest, timeout: float) -> dict[str, Any]:
            path = undo_path(service, resource, request.idempotency_key)
            body = request_body(service.name, resource, True, request, self._input_keys)
            model = resource.undo_body or resource.body
            recorded = calls.redacted(body, model.sensitive if resource.undo_body is not None else ())
            await self._call(service.name, path, request, timeout, body, resource.asynchronous, recorded)
            return {}

        return run

    def actions(self) -> dict[str, dict[str, Action]]:
        """Per service, its actions by name (the names the workflows' steps use)."""
        return {
            name: {
                action: (self._undo if undoes else self._apply)(service, resource)
                for resource in service.resources
                for action, undoes in ((resource.apply, False), (resource.undo, True))
                if action
            }
            for name, service in self.services.items()
        }


def document(request: AgentRequest, keys: Keyring | None = None) -> Document:
    """The document a body is built from: the order's input and the results so far, as the Scheduler
    sent them with the request, with the input's sealed values opened (:mod:`engine.sealing`): the one
    place they are, just before the call, and never kept. Raises :class:`engine.sealing.SealError`."""
    payload = request.payload
    return Document(
        order_id=request.order_id,
        input=sealing.open_input(payload.get("input") or {}, request.order_id, keys),
        results=dict(payload.get("results") or {}),
    )


def request_body(
    service: str, resource: Resource, undoes: bool, request: AgentRequest, keys: Keyring | None = None
) -> dict[str, Any]:
    """The body of the call ``request`` asks of ``resource``: its body model (or undo body model) built
    from the request's document (its sealed input values opened with ``keys``); an undo without a model of
    its own names the order and, when the apply's answer came back, its values (a lost answer leaves only
    the key, which identifies the effect as well). Raises PermanentError when the order cannot make the
    body, a sealed value that does not open included."""
    model = resource.undo_body if undoes else resource.body
    if model is None:
        results = dict(request.payload.get("results") or {})
        own = {name: results[name] for name in resource.result_names if results.get(name) is not None}
        return {"orderId": request.order_id, **own}
    try:
        return model.build(document(request, keys)).wire()
    except sealing.SealError as exc:
        # No retry opens it (a key retired too early, a value changed): the step fails and the order is
        # undone. The service is not at fault: its breaker is not charged.
        raise PermanentError(f"{service}: {exc}") from exc
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        # The order cannot make this call's body (e.g. a total too large for JSON, a result it needs
        # missing): no retry can help, and the service is not at fault, so its breaker is not charged.
        raise PermanentError(f"{service}: the request cannot be encoded: {exc}") from exc


def declared_result(service: ServiceDefinition, resource: Resource, answer: dict[str, Any]) -> dict[str, Any]:
    """The declared result values of an apply call's answer: what is passed on, nothing else."""
    if resource.result is None:
        return {}
    try:
        return resource.result.model_validate(answer).model_dump(by_alias=True, mode="json")
    except ValidationError as exc:
        # The effect is made but its answer lacks what later steps need: the same key replays the same
        # answer, so a retry cannot help; the step fails and the order is undone.
        raise PermanentError(f"{service.name}: the answer lacks its declared result: {exc}") from exc


def _reason(status: int, answer: bytes) -> str:
    try:
        error = json.loads(answer).get("error", {})
        return str(error.get("message") or error.get("code") or f"HTTP {status}")
    except ValueError:
        return f"HTTP {status}"
