"""Turning queue message bodies into engine messages, and refusing what cannot be parsed."""

from __future__ import annotations

import logging

from pydantic import BaseModel, ValidationError

from . import telemetry
from .errors import PoisonMessage

log = logging.getLogger("engine.inbound")


def parse[M: BaseModel](
    model: type[M], body: bytes, queue: str, message_id: str | None, delivery_count: int | None
) -> M:
    """Validate a JSON body as ``model``; raise :class:`PoisonMessage` with the reason if it is not one."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        reason = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        telemetry.emit_event(
            telemetry.POISON_MESSAGE,
            queue=queue,
            messageId=message_id,
            deliveryCount=delivery_count,
            reason=reason[:500],
        )
        raise PoisonMessage(queue, message_id, model.__name__, reason) from exc
