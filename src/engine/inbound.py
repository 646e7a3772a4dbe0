"""Turning queue message bodies into engine messages: refusing what can never be parsed (poison, on its
way to the dead-letter queue), and passing over what a later release wrote (:mod:`engine.formats`)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, RootModel, ValidationError
from pydantic_core import ErrorDetails

from . import formats, telemetry
from .errors import NotUnderstood, PoisonMessage
from .parts import EngineParts
from .ports import MessageSender

log = logging.getLogger("engine.inbound")

# How long a message this release cannot read waits before it is offered again (to any instance: one of a
# later release reads it). Long enough that a release that cannot read it does not spin on it.
PASS_OVER_SECONDS = 60.0
# A validation error of these kinds is a value a later release may write (a new command kind, outcome or
# state), not a malformed message.
_LATER_VALUES = frozenset({"enum", "literal_error"})


@dataclass(frozen=True)
class Inbound:
    """One received message, as the host hands it over."""

    body: bytes
    queue: str
    message_id: str | None
    delivery_count: int | None = None
    correlation_id: str | None = None


class PassedOver(RootModel[Any]):
    """A message this release could not read, sent again unchanged (its JSON as received)."""


def parse[M: BaseModel](
    model: type[M], body: bytes, queue: str, message_id: str | None, delivery_count: int | None
) -> M:
    """Validate a JSON body as ``model``. Raises :class:`NotUnderstood` for a message of a later format or
    with a value a later release may send (a kind, an outcome), and :class:`PoisonMessage` with the reason
    for anything else that is not one. Fields it does not know are ignored: a later release may add them."""
    try:
        message = model.model_validate_json(body)
    except ValidationError as exc:
        raw = _json(body)
        order_id = _order_id(raw)
        _refuse_later_format(model, raw.get("format") if isinstance(raw, dict) else None, order_id)
        errors = exc.errors(include_url=False)
        reason = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in errors)
        if order_id is not None and all(_later_value(e) for e in errors):
            raise NotUnderstood(f"a {model.__name__} with {reason}", order_id) from exc
        telemetry.emit_event(
            telemetry.POISON_MESSAGE,
            queue=queue,
            messageId=message_id,
            deliveryCount=delivery_count,
            reason=reason[:500],
        )
        raise PoisonMessage(queue, message_id, model.__name__, reason) from exc
    # Read in one pass, as every message is: its format is checked once it is known to be one.
    written = getattr(message, "format", 1)
    if written > formats.MESSAGES_READ:
        _refuse_later_format(model, written, _order_id(_json(body)))
    return message


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _refuse_later_format(model: type[BaseModel], written: object, order_id: str | None) -> None:
    if isinstance(written, int) and not isinstance(written, bool) and written > formats.MESSAGES_READ:
        raise NotUnderstood(
            f"a {model.__name__} of format {written}; this release reads up to {formats.MESSAGES_READ}",
            order_id,
        )


def _later_value(error: ErrorDetails) -> bool:
    """A word this release does not know where it expects one of a few (a kind, an outcome, a state)."""
    return error["type"] in _LATER_VALUES and isinstance(error.get("input"), str)


def _order_id(raw: object) -> str | None:
    value = raw.get("orderId") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and value else None


async def receive[M: BaseModel](
    model: type[M],
    inbound: Inbound,
    handle: Callable[[M], Awaitable[None]],
    parts: Callable[[], Awaitable[EngineParts]],
) -> None:
    """Parse a message and handle it. What this release cannot read (the message, or the order's stored
    records it leads to) is passed over: reported, and sent again unchanged after
    :data:`PASS_OVER_SECONDS`, for whichever instance reads it; it is never dead-lettered. Poison still
    raises :class:`PoisonMessage`."""
    try:
        message = parse(model, inbound.body, inbound.queue, inbound.message_id, inbound.delivery_count)
        await handle(message)
    except NotUnderstood as exc:
        engine = await parts()
        await pass_over(inbound, exc, engine.sender, engine.clock.now())


_PASSED = re.compile(r"~p(\d+)$")


async def pass_over(inbound: Inbound, exc: NotUnderstood, sender: MessageSender, now: datetime) -> None:
    """Report a message this release cannot read and send it again, unchanged, later."""
    previous = inbound.message_id or ""
    match = _PASSED.search(previous)
    times = int(match.group(1)) + 1 if match else 1
    # A new id for each time: the broker's duplicate detection would drop the copy under the same one.
    message_id = f"{previous[: match.start()] if match else previous}~p{times}"[-128:]
    telemetry.emit_event(
        telemetry.NOT_UNDERSTOOD,
        queue=inbound.queue,
        messageId=inbound.message_id,
        orderId=exc.order_id,
        what=exc.what[:500],
        passedOver=times,
    )
    await sender.send(
        inbound.queue,
        PassedOver(json.loads(inbound.body)),
        message_id=message_id,
        correlation_id=inbound.correlation_id or exc.order_id or "",
        scheduled_at=now + timedelta(seconds=PASS_OVER_SECONDS),
    )
