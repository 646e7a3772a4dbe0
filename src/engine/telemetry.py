"""Telemetry: the names of alert events, in one place, and logging that carries order, step and attempt.

The Bicep alert rules query these exact names; a test checks they agree.
"""

from __future__ import annotations

import logging
from typing import Any

# Alert events. Application Insights custom events carry these names (see infra/ alert rules).
ORDER_ENTERED_ERROR = "OrderEnteredError"
POISON_MESSAGE = "PoisonMessageRejected"  # on the way to the dead-letter queue
# A message or record this release cannot read (a later release's, or corrupted): passed over, not failed on.
NOT_UNDERSTOOD = "NotUnderstood"
SUPERVISOR_SWEEP_COMPLETED = "SupervisorSweepCompleted"
# An approval's deadline passed with no decision: its policy was applied (undo, or Error).
APPROVAL_OVERDUE = "ApprovalOverdue"
ALERT_EVENTS = (ORDER_ENTERED_ERROR, POISON_MESSAGE, APPROVAL_OVERDUE, NOT_UNDERSTOOD)

# azure-monitor-opentelemetry turns a log record with this attribute into a customEvents row.
_CUSTOM_EVENT_ATTRIBUTE = "microsoft.custom_event.name"

log = logging.getLogger("engine")


def context(
    order_id: str, step: str | None = None, attempt: int | None = None, **more: Any
) -> dict[str, Any]:
    """Structured fields for a log record: every line about a step says which order, step and attempt."""
    fields: dict[str, Any] = {"orderId": order_id}
    if step is not None:
        fields["step"] = step
    if attempt is not None:
        fields["attempt"] = attempt
    fields.update(more)
    return fields


def _suffix(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items())


def info(logger: logging.Logger, message: str, **fields: Any) -> None:
    """Log at INFO with the fields both in the text and as record attributes (the text is built only
    when the logger logs INFO at all)."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s %s", message, _suffix(fields), extra=fields)


def warning(logger: logging.Logger, message: str, **fields: Any) -> None:
    """Log at WARNING with the fields both in the text and as record attributes (when it logs WARNING)."""
    if logger.isEnabledFor(logging.WARNING):
        logger.warning("%s %s", message, _suffix(fields), extra=fields)


def emit_event(name: str, **fields: Any) -> None:
    """Emit a named custom event (an alert source when the name is in ALERT_EVENTS)."""
    level = logging.ERROR if name in ALERT_EVENTS else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "event %s %s", name, _suffix(fields), extra={_CUSTOM_EVENT_ATTRIBUTE: name, **fields})
