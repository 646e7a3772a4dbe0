"""The HTTP API of the simulated remote services and of their controls.

Everything a simulator serves comes from the services' declaration (``orders.catalog.SERVICES``): for
every resource of every service, an apply call ``POST /<service>/<collection>``, idempotent on its
``Idempotency-Key`` header, whose body is validated with the resource's ``body`` model and whose answer
carries the resource's declared result values (``resource.result.simulated(key)``: the same on every
replay of the key); and, for a resource that can be undone (it declares ``undo``), an undo call
``POST /<service>/<collection>/<key>/<undo>`` that takes the key in its path and may carry a body
(validated with ``undo_body`` when declared; an empty body is accepted too). A resource without ``undo``
has no undo route: a call there is a 404 like any unknown route. The paths are the agents' client's own
(``apply_path``, ``undo_path``).

Every call first waits the configured latency of its service, then draws one random number that picks
at most one fault (see ``faults.pick_fault``); the ledger records what was really applied, whatever the
caller was told, with the result values answered and the declared result values each body carried, and
the trace each call that reached it came in (its W3C ``traceparent`` header's trace id, when it has one).

A resource declared ``asynchronous`` answers a share of its applies (``asyncRate``) with 202 Accepted when
the call names a ``Callback-Url``: after ``callbackDelayMs`` it applies the effect (or refuses it, if the
call drew a permanent fault) and posts the outcome there, signed with the service's callback secret
(``orders.callbacks``), the ``Callback-Context`` in it, and the ``traceparent`` the call came with (so the
app's handling of the callback joins the caller's trace). Its callbacks can be lost, sent twice, or sent late,
as the fault profile says; a callback the app does not answer 2xx or 4xx is sent again a few times.

While it decides such an apply, the service holds the key as an idempotent provider does (the deterministic
simulation's model, ``docs/simulation.md``, "Callbacks"): a call with the same key (the Agent's retry, the
Supervisor's re-dispatch) is answered 202 again, never with a fresh draw of a rejection, and its dispatch is
called back too once the service has decided; an undo that lands meanwhile withdraws the apply (a payment
provider voids an authorisation it has not captured): the effect is never made, every dispatch is called
back ``refused``, and the key is refused from then on. Without that, an undo that overtook a decision
slower than the step's CompleteBy found nothing to undo, the decision then made the effect, and the order
ended Compensated with its payment taken. What is being decided is known to this process only (the hosted
simulators' instances each know their own).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import httpx
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive

from engine import tracing
from orders.callbacks import signed_headers
from orders.services.client import CALLBACK_CONTEXT_HEADER, CALLBACK_URL_HEADER, apply_path
from orders.services.declaration import Resource, ServiceBody, ServiceDefinition
from orders.settings import callback_secrets

from .faults import Fault, FaultInjector, Stats
from .ledger import Change, Ledger, LedgerStore, LedgerUnavailable
from .models import DECLARED, FAULTS_UPDATE, MAX_KEY_LENGTH, SERVICES, FaultSettings, ServiceName, Values

log = logging.getLogger(__name__)

# Request bodies here are a few hundred bytes; the cap keeps a runaway client from filling memory.
MAX_BODY_BYTES = 1024 * 1024

UNAVAILABLE_MESSAGE = "the service is unavailable, try again later"


@dataclass(frozen=True)
class ResourceSpec:
    """One resource of one declared service, as its simulator serves it."""

    service: ServiceDefinition
    resource: Resource

    @property
    def name(self) -> ServiceName:
        """The service's name: the ledger, the faults and the counters are per service."""
        return self.service.name

    @property
    def collection(self) -> str:
        """The apply route; undo calls live under it."""
        return apply_path(self.service, self.resource)

    @property
    def undo_route(self) -> str | None:
        """The undo route, or None for a resource that cannot be undone. ``:path`` lets a key contain "/"
        (sent as is or as %2F); the literal undo action after it still anchors the route."""
        if self.resource.undo is None:
            return None
        return f"{self.collection}/{{key:path}}/{self.resource.undo}"

    def simulated_result(self, key: str) -> Values:
        """The declared result values the apply of ``key`` answers (none if the resource declares none)."""
        return self.resource.simulated(key)


# The controls' paths (see create_app); a service of one of these names would be shadowed by them.
CONTROLS = ("health", "faults", "ledger", "stats")
# What every apply's answer holds besides the declared result values, which must not take these names.
ANSWER_FIELDS = ("id", "orderId", "status")


def resource_specs(services: Iterable[ServiceDefinition]) -> tuple[ResourceSpec, ...]:
    """Every resource of every service, in declaration order."""
    specs = tuple(ResourceSpec(service, resource) for service in services for resource in service.resources)
    clashes = sorted({spec.name for spec in specs} & set(CONTROLS))
    if clashes:
        raise ValueError(f"the simulators' controls use the names {', '.join(clashes)}: rename the service")
    for spec in specs:
        taken = sorted(set(spec.resource.result_names) & set(ANSWER_FIELDS))
        if taken:
            raise ValueError(
                f"service {spec.name}, resource {spec.resource.collection}: the result names "
                f"{', '.join(taken)} are those of every answer's own fields ({', '.join(ANSWER_FIELDS)}): "
                "rename them in its result model"
            )
    return specs


RESOURCE_SPECS: tuple[ResourceSpec, ...] = resource_specs(DECLARED)


def result_names(specs: Iterable[ResourceSpec]) -> frozenset[str]:
    """Every result name a resource returns: a body's field of one of these names carries a value passed
    on from an earlier step, which the ledger records for the ledger check."""
    return frozenset(name for spec in specs for name in spec.resource.result_names)


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with the given status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON error body every failure of the simulators uses."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def unavailable() -> JSONResponse:
    """The 503 of a transient fault, a hang and a lost reply: the caller cannot tell them apart."""
    return error_response(503, "Unavailable", UNAVAILABLE_MESSAGE)


# Why an apply withdrawn by its undo is refused (its callbacks, and any later call with its key).
WITHDRAWN = "withdrawn by its undo"


@dataclass(frozen=True)
class CallbackTarget:
    """A dispatch a service that answered 202 owes a callback: where to post it, the ``Callback-Context``
    it names, and the trace the call came in."""

    url: str
    context: str
    traceparent: str | None


@dataclass(eq=False)
class Deciding:
    """An apply answered 202 that the service is still deciding: the fault its first call drew (a
    permanent one refuses it), the dispatches it owes a callback in the order it answered them, whether an
    undo withdrew it, and, once its effect is being recorded (too late to withdraw), the event set when
    that is done."""

    fault: Fault
    targets: list[CallbackTarget]
    withdrawn: bool = False
    recorded: asyncio.Event | None = None


class Simulators:
    """The state behind the app: the ledger, the fault profile and the counters."""

    def __init__(
        self,
        ledger: LedgerStore,
        faults: FaultInjector,
        result_names: frozenset[str] = frozenset(),
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.faults = faults
        self.result_names = result_names
        self.stats = Stats()
        # The callback secret of each service that answers later (a service without one never does).
        self.secrets = dict(secrets or {})
        self._callbacks: set[asyncio.Task[None]] = set()  # kept, so that none is collected while it runs
        # The applies answered 202 and not decided yet, and the keys their undo withdrew, by (service, key).
        self._deciding: dict[tuple[ServiceName, str], Deciding] = {}
        self._withdrawn: set[tuple[ServiceName, str]] = set()
        # Set when the server shuts down, so that hanging calls end now rather than after hangMs.
        self.stopping = asyncio.Event()

    def stop_waiting(self) -> None:
        """End every hang in progress (called from the event loop when the server starts shutting down)."""
        self.stopping.set()

    async def hang(self, request: Request, seconds: float) -> None:
        """Wait ``seconds``, less if the caller hangs up or the server stops: nobody would get the answer."""
        waiters = {
            asyncio.ensure_future(_wait_for_disconnect(request.receive)),
            asyncio.ensure_future(self.stopping.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def apply(self, spec: ResourceSpec, request: Request) -> Response:
        """One apply call: validate, wait the latency, draw a fault, record the effect unless it stops it.
        The answer carries the declared result values the ledger recorded with the effect."""
        key = _checked_key(request.headers.get("idempotency-key"), "the Idempotency-Key header")
        raw = await _read_body(request)
        body = _validated(spec.resource.body, raw)
        carried = self._carried(raw)
        traceparent, trace_id = _trace(request)
        settings = self._begin_call(spec.name)
        await _sleep_ms(settings.latency_ms)
        # The replay of a key already applied answers what the first call did: a real service looks the
        # key up before any business rule runs, so it cannot decline an effect it has already made, nor
        # one it is still deciding.
        already_applied = await self.ledger.find(spec.name, key) is not None
        deciding = self._deciding.get((spec.name, key))
        fault = self._draw(spec.name, settings, permanent_possible=not already_applied and deciding is None)
        if fault is Fault.TRANSIENT:
            return self._finish(spec, "apply", key, fault, unavailable())
        if (spec.name, key) in self._withdrawn and not already_applied and fault is not Fault.HANG:
            withdrawn = error_response(422, "Rejected", WITHDRAWN)
            return self._finish(spec, "apply", key, fault, withdrawn)
        accepted = JSONResponse({"id": key, "status": "accepted"}, status_code=202)
        if deciding is not None and fault is not Fault.HANG:
            # Still deciding: taken again, and this dispatch is called back too once it has decided.
            target = self._callback_target(spec, request, traceparent)
            if target is not None:
                deciding.targets.append(target)
            self.stats.count(spec.name, "accepted")
            answer = unavailable() if fault is Fault.LOST_REPLY else accepted
            return self._finish(spec, "apply", key, fault, answer)
        later = self._answers_later(spec, request, settings, traceparent)
        if later is not None and fault is not Fault.HANG:
            self.stats.count(spec.name, "accepted")
            made = Deciding(fault, [later])
            self._deciding[(spec.name, key)] = made
            finish = self._finish_later(spec, key, body.order_id, carried, made, settings, traceparent)
            task = asyncio.ensure_future(finish)
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)
            return self._finish(spec, "apply", key, fault, accepted)
        if fault is Fault.PERMANENT:
            rejected = error_response(422, "Rejected", spec.resource.rejection)
            return self._finish(spec, "apply", key, fault, rejected)
        if fault is Fault.HANG:
            await self.hang(request, settings.hang_ms / 1000)
            return self._finish(spec, "apply", key, fault, unavailable())
        applied = self.ledger.apply(
            spec.name,
            key,
            body.order_id,
            result=spec.simulated_result(key),
            carried=carried,
            trace_id=trace_id,
        )
        change = await self._record(applied)
        if fault is Fault.LOST_REPLY:
            return self._finish(spec, "apply", key, fault, unavailable())
        assert change.entry is not None  # an apply always leaves an entry
        # A replay answers what the first apply recorded; an entry from before results were recorded
        # answers the values the first apply would have (they depend on the key alone).
        result = change.entry.result if change.entry.result is not None else spec.simulated_result(key)
        reply = {**result, "id": key, "orderId": change.entry.order_id, "status": spec.resource.applied}
        return self._finish(
            spec, "apply", key, fault, JSONResponse(reply, status_code=201 if change.changed else 200)
        )

    async def compensate(self, spec: ResourceSpec, request: Request) -> Response:
        """One compensation call: like an apply, but it never fails permanently. Its body, if any, is
        validated with the resource's ``undo_body`` (else it must name the order); an empty one is taken
        as it always was."""
        key = _checked_key(request.path_params["key"], "the key in the path")
        raw = await _read_body(request)
        carried: Values = {}
        if raw.strip():
            _validated(spec.resource.undo_body or ServiceBody, raw)
            carried = self._carried(raw)
        settings = self._begin_call(spec.name)
        await _sleep_ms(settings.latency_ms)
        fault = self._draw(spec.name, settings, permanent_possible=False)
        if fault is Fault.TRANSIENT:
            return self._finish(spec, "compensate", key, fault, unavailable())
        if fault is Fault.HANG:
            await self.hang(request, settings.hang_ms / 1000)
            return self._finish(spec, "compensate", key, fault, unavailable())
        _, trace_id = _trace(request)
        deciding = self._deciding.get((spec.name, key))
        if deciding is not None and deciding.recorded is None:
            self._withdraw(spec, key, deciding)
        elif deciding is not None and deciding.recorded is not None:
            await deciding.recorded.wait()  # decided and being recorded: undone once it is
        change = await self._record(
            self.ledger.compensate(spec.name, key, carried=carried, trace_id=trace_id)
        )
        if fault is Fault.LOST_REPLY:
            return self._finish(spec, "compensate", key, fault, unavailable())
        status = spec.resource.undone if change.entry is not None else "not-found"
        return self._finish(spec, "compensate", key, fault, JSONResponse({"id": key, "status": status}))

    def _callback_target(
        self, spec: ResourceSpec, request: Request, traceparent: str | None
    ) -> CallbackTarget | None:
        """Where this call of an asynchronous resource would be called back, if it names where."""
        url = request.headers.get(CALLBACK_URL_HEADER.lower())
        context = request.headers.get(CALLBACK_CONTEXT_HEADER.lower())
        if not (spec.resource.asynchronous and url and context and spec.name in self.secrets):
            return None
        return CallbackTarget(url, context, traceparent)

    def _answers_later(
        self, spec: ResourceSpec, request: Request, settings: FaultSettings, traceparent: str | None
    ) -> CallbackTarget | None:
        """Where to call back if this apply is answered 202 and finished by a callback."""
        target = self._callback_target(spec, request, traceparent)
        if target is None:
            return None
        return target if self.faults.chance(settings.async_rate) else None

    def _withdraw(self, spec: ResourceSpec, key: str, deciding: Deciding) -> None:
        """An undo landed while the apply is still being decided: the apply is never made (its callbacks
        say it was refused), and the key is refused from now on."""
        deciding.withdrawn = True
        del self._deciding[(spec.name, key)]
        self._withdrawn.add((spec.name, key))
        log.info("%s key=%r: the apply being decided is withdrawn by its undo", spec.name, key)

    async def _finish_later(
        self,
        spec: ResourceSpec,
        key: str,
        order_id: str,
        carried: Values,
        deciding: Deciding,
        settings: FaultSettings,
        traceparent: str | None,
    ) -> None:
        """What a service that answered 202 does next: decide, record the effect (unless an undo withdrew
        it meanwhile), and call back every dispatch it answered 202 meanwhile (each in the trace its call
        came in)."""
        late = self.faults.chance(settings.callback_late_rate)
        delay = settings.callback_delay_ms + (settings.callback_late_ms if late else 0)
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=delay / 1000)
            self._decided(spec, key, deciding)
            return  # the server stops: the callback is never sent (as if lost)
        except TimeoutError:
            pass
        outcome: dict[str, object]
        if deciding.withdrawn:
            outcome = {"outcome": "refused", "reason": WITHDRAWN}
        elif deciding.fault is Fault.PERMANENT:
            self._decided(spec, key, deciding)
            outcome = {"outcome": "refused", "reason": spec.resource.rejection}
        else:
            # Decided: from here an undo waits for the effect to be recorded, then undoes it.
            deciding.recorded = asyncio.Event()
            applied = self.ledger.apply(
                spec.name,
                key,
                order_id,
                result=spec.simulated_result(key),
                carried=carried,
                trace_id=tracing.trace_id(traceparent),
            )
            try:
                change = await self._record(applied)
            except ApiError:
                return  # nothing recorded: the app's Supervisor re-dispatches once the step's time is up
            finally:
                deciding.recorded.set()
                self._decided(spec, key, deciding)
            assert change.entry is not None
            result = change.entry.result if change.entry.result is not None else spec.simulated_result(key)
            outcome = {"outcome": "done", "result": result}
        if late:
            self.stats.count(spec.name, "callbackLate")
        for target in deciding.targets:
            lost = self.faults.chance(settings.callback_lost_rate)
            twice = self.faults.chance(settings.callback_duplicate_rate)
            for name, happened in (("callbackLost", lost), ("callbackDuplicated", twice)):
                if happened:
                    self.stats.count(spec.name, name)
            if lost:
                continue
            body = json.dumps({"context": target.context, **outcome}).encode()
            for _ in range(2 if twice else 1):
                await self._call_back(spec.name, target.url, body, target.traceparent)

    def _decided(self, spec: ResourceSpec, key: str, deciding: Deciding) -> None:
        """The apply is decided (or never will be): the key is no longer being decided."""
        if self._deciding.get((spec.name, key)) is deciding:
            del self._deciding[(spec.name, key)]

    async def _call_back(self, service: ServiceName, url: str, body: bytes, traceparent: str | None) -> None:
        """Post one signed callback, again after a short wait while the app answers neither 2xx nor 4xx;
        with ``traceparent`` as its header when given."""
        async with httpx.AsyncClient(timeout=10) as client:
            for attempt in range(4):
                headers = signed_headers(self.secrets[service], body)
                if traceparent is not None:
                    headers[tracing.TRACEPARENT] = traceparent
                self.stats.count(service, "callbacks")
                try:
                    response = await client.post(url, content=body, headers=headers)
                    if response.status_code < 500:
                        if response.status_code >= 300:
                            log.info("callback to %s answered %d", url, response.status_code)
                        return
                except httpx.HTTPError as exc:
                    log.info("callback to %s failed: %s", url, exc)
                await asyncio.sleep(0.2 * 2**attempt)  # a webhook sender's backoff

    def _carried(self, body: bytes) -> Values:
        """A validated body (a JSON object) as received, every field (null included: the body had the
        field but no value for it): the values passed on it carried, and what the order's call record
        must show (sensitive fields aside, which the record redacts)."""
        return dict(json.loads(body))

    def _begin_call(self, service: ServiceName) -> FaultSettings:
        """Count the call and take the settings it runs under (later changes do not affect it)."""
        self.stats.call(service)
        return self.faults.settings(service)

    def _draw(self, service: ServiceName, settings: FaultSettings, *, permanent_possible: bool) -> Fault:
        fault = self.faults.draw(settings, permanent_possible=permanent_possible)
        self.stats.fault(service, fault)
        return fault

    @staticmethod
    async def _record(change: Awaitable[Change]) -> Change:
        """Await a ledger change, turning a failed write into a JSON 500 (the ledger is then unchanged)."""
        try:
            return await change
        except (OSError, LedgerUnavailable) as exc:
            # The cause (a file system's or the table's error) is for the log, not for the caller.
            log.error("cannot write the ledger: %s", exc)
            raise ApiError(
                500, "LedgerWriteFailed", "the ledger could not be written; nothing was recorded"
            ) from exc

    @staticmethod
    def _finish(spec: ResourceSpec, operation: str, key: str, fault: Fault, response: Response) -> Response:
        log.debug(
            "%s %s key=%r fault=%s -> %d (%s)",
            spec.name,
            operation,
            key,
            fault.value,
            response.status_code,
            spec.resource.collection,
        )
        return response


def _trace(request: Request) -> tuple[str | None, str | None]:
    """The call's ``traceparent`` header and its trace id; (None, None) if it names no trace."""
    traceparent = request.headers.get(tracing.TRACEPARENT)
    trace_id = tracing.trace_id(traceparent)
    return (None, None) if trace_id is None else (traceparent, trace_id)


async def _wait_for_disconnect(receive: Receive) -> None:
    """Return when the client closes the connection (the request body has already been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _sleep_ms(milliseconds: int) -> None:
    if milliseconds > 0:
        await asyncio.sleep(milliseconds / 1000)


def _checked_key(key: str | None, where: str) -> str:
    """The idempotency key if it is 1 to MAX_KEY_LENGTH characters long, else a 400."""
    if not key:
        raise ApiError(400, "InvalidIdempotencyKey", f"{where} is missing or empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ApiError(400, "InvalidIdempotencyKey", f"{where} is longer than {MAX_KEY_LENGTH} characters")
    return key


async def _read_body(request: Request) -> bytes:
    """The request body, or a 413 once it passes MAX_BODY_BYTES."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, "BodyTooLarge", f"the body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _validated(model: type[ServiceBody], body: bytes) -> ServiceBody:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise ApiError(400, "InvalidBody", describe(exc)) from exc


def describe(exc: ValidationError) -> str:
    """A one-line account of what is wrong with a body, e.g. ``items.0.quantity: Input should be ...``."""
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(part) for part in error["loc"])
        parts.append(f"{location}: {error['msg']}" if location else error["msg"])
    return "; ".join(parts)


def create_app(
    data_dir: Path | None,
    seed: int | None = None,
    ledger: LedgerStore | None = None,
    services: Iterable[ServiceDefinition] | None = None,
) -> Starlette:
    """The simulators' Starlette app, with the ledger ``ledger`` or else a ledger file in ``data_dir``.

    ``seed`` makes the fault draws reproducible. ``services`` replaces the declared services' resources
    (tests serve resources of their own under declared services' names: the ledger, the faults and the
    counters are per declared service). Raises ``LedgerError`` if an existing ledger file in
    ``data_dir`` cannot be read. The state is at ``app.state.simulators``.
    """
    specs = RESOURCE_SPECS if services is None else resource_specs(services)
    undeclared = sorted({spec.name for spec in specs} - set(SERVICES))
    if undeclared:
        raise ValueError(
            f"services {', '.join(undeclared)} are not declared (declared: {', '.join(SERVICES)})"
        )
    if ledger is None:
        if data_dir is None:
            raise ValueError("create_app needs a data directory or a ledger")
        ledger = Ledger.load(data_dir)
    simulators = Simulators(ledger, FaultInjector(seed), result_names(specs), callback_secrets())
    log.info("ledger %s; fault seed %s", ledger.location, seed)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def get_faults(request: Request) -> Response:
        return JSONResponse(simulators.faults.profile())

    async def post_faults(request: Request) -> Response:
        try:
            changes = FAULTS_UPDATE.validate_json(await _read_body(request))
        except ValidationError as exc:
            raise ApiError(400, "InvalidFaults", describe(exc)) from exc
        simulators.faults.update(changes)
        log.info("faults set: %s", {service: settings.wire() for service, settings in changes.items()})
        return JSONResponse(simulators.faults.profile())

    async def get_ledger(request: Request) -> Response:
        return JSONResponse(await simulators.ledger.entries())

    async def get_stats(request: Request) -> Response:
        return JSONResponse(simulators.stats.snapshot())

    routes = [  # the paths of CONTROLS
        Route("/health", health, methods=["GET"]),
        Route("/faults", get_faults, methods=["GET"]),
        Route("/faults", post_faults, methods=["POST"]),
        Route("/ledger", get_ledger, methods=["GET"]),
        Route("/stats", get_stats, methods=["GET"]),
    ]
    for spec in specs:
        routes += _resource_routes(simulators, spec)

    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            LedgerUnavailable: _ledger_unavailable,
            Exception: _server_error,
        },
    )
    app.state.simulators = simulators
    return app


def _resource_routes(simulators: Simulators, spec: ResourceSpec) -> list[Route]:
    async def apply(request: Request) -> Response:
        return await simulators.apply(spec, request)

    async def compensate(request: Request) -> Response:
        return await simulators.compensate(spec, request)

    route = f"{spec.name}-{spec.resource.collection}"
    routes = [Route(spec.collection, apply, methods=["POST"], name=f"{route}-{spec.resource.apply}")]
    # An effect that cannot be undone has no undo route: a call there is answered as any unknown route.
    if spec.undo_route is not None:
        routes.append(
            Route(spec.undo_route, compensate, methods=["POST"], name=f"{route}-{spec.resource.undo}")
        )
    return routes


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette raises these itself for unknown routes (404) and wrong methods (405).
    assert isinstance(exc, HTTPException)
    code = HTTPStatus(exc.status_code).phrase.title().replace(" ", "").replace("-", "")
    message = exc.detail if exc.status_code != 404 else f"no route {request.method} {request.url.path}"
    return error_response(exc.status_code, code, message, headers=dict(exc.headers) if exc.headers else None)


async def _ledger_unavailable(request: Request, exc: Exception) -> Response:
    # A read of the ledger failed (a write failing is LedgerWriteFailed): worth a retry. Its cause, which may
    # carry the storage client's own error text, goes to the log only.
    log.warning("cannot read the ledger: %s", exc)
    return error_response(503, "LedgerUnavailable", "the ledger did not answer; try again")


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(500, "InternalError", "internal error")
