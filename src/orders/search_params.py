"""The query of ``GET /api/orders``: a listing by state, or a search (``engine.search``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from engine import WAIT_KINDS, ProcessState, SearchQuery, WorkflowCatalog

from .access import STOREFRONT_NAME

# What the route reads besides the declared searchable fields.
LISTING = ("processState", "waitingFor", "storefront", "pageSize", "continuationToken")
SEARCH = ("workflow", "workflowVersion", "step", "atStepSeconds", "submittedFrom", "submittedTo")
# A workflow's version: ASCII digits (int() also takes '٣', '+1' and '1_0'), no more than a version has.
_VERSION = re.compile(r"[1-9][0-9]{0,8}")


class BadQuery(ValueError):
    """A query parameter the route cannot take (its message says which, and why)."""


def searchable_fields(catalog: WorkflowCatalog) -> list[str]:
    """Every input field a deployed workflow declares searchable."""
    return sorted({name for workflow in catalog.workflows for name in workflow.searchable})


def _time(query: Mapping[str, str], name: str) -> datetime | None:
    text = query.get(name)
    if not text:
        return None
    # RFC 3339 allows a lower-case "t" and "z", and a leap second (:60), which Python's parser does not.
    text = re.sub(r"(T\d\d:\d\d):60", r"\1:59", text.upper())
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadQuery(
            f"{name} must be a time in ISO 8601 with its offset, e.g. 2026-11-27T09:00:00Z"
        ) from exc
    if at.tzinfo is None:
        raise BadQuery(f"{name} must say its offset (Z for UTC)")
    try:
        # In UTC, as the search's keys hold it: 0001-01-01T00:00:00+01:00 is no time in UTC.
        return at.astimezone(UTC)
    except OverflowError:
        raise BadQuery(f"{name} is out of range: in UTC it is before year 1 or after year 9999") from None


def parse(query: Mapping[str, str], catalog: WorkflowCatalog, now: datetime) -> SearchQuery | None:
    """The search ``query`` asks for, or None for a plain listing by state (``processState`` and only
    LISTING parameters). With no criterion at all, every order (by time of submission).

    Raises :class:`BadQuery` for an unknown parameter (a misspelt one must not widen a search to every
    order), or a value the route cannot use."""
    fields = searchable_fields(catalog)
    unknown = sorted(set(query) - {*LISTING, *SEARCH, *fields})
    if unknown:
        raise BadQuery(
            f"unknown query parameter {unknown[0]}; known: {', '.join([*LISTING, *SEARCH, *fields])}"
        )
    empty = sorted(name for name, value in query.items() if value == "" and name != "continuationToken")
    if empty:
        raise BadQuery(f"{empty[0]} is empty: give it a value, or leave it out")
    listing = bool(query.get("processState")) and not any(query.get(name) for name in (*SEARCH, *fields))
    if listing:
        return None
    state_text = query.get("processState") or None
    if state_text is not None and state_text not in {s.value for s in ProcessState}:
        raise BadQuery(f"processState must be one of {', '.join(s.value for s in ProcessState)}")
    waiting_for = query.get("waitingFor") or None
    if waiting_for is not None and waiting_for not in WAIT_KINDS:
        raise BadQuery(f"waitingFor must be one of {', '.join(WAIT_KINDS)}")
    storefront = query.get("storefront") or None
    if storefront is not None and not STOREFRONT_NAME.match(storefront):
        raise BadQuery("storefront must be a storefront's name")
    workflow = query.get("workflow") or None
    if workflow is not None and workflow not in catalog.names:
        raise BadQuery(f"workflow must be one of {', '.join(catalog.names)}")
    version: int | None = None
    if query.get("workflowVersion"):
        if not _VERSION.fullmatch(query["workflowVersion"]):
            raise BadQuery("workflowVersion must be a whole number from 1 to 999999999")
        version = int(query["workflowVersion"])
    step = query.get("step") or None
    if step is not None and not any(s.name == step for w in catalog.workflows for s in w.steps):
        raise BadQuery(f"no deployed workflow has a step {step}")
    at_step_before: datetime | None = None
    if query.get("atStepSeconds"):
        try:
            seconds = float(query["atStepSeconds"])
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds <= 10 * 365 * 86_400:
            raise BadQuery("atStepSeconds must be a number of seconds, 0 or more")
        at_step_before = now - timedelta(seconds=seconds)
    submitted_from, submitted_to = _time(query, "submittedFrom"), _time(query, "submittedTo")
    values = {name: query[name] for name in fields if query.get(name)}
    for name, value in values.items():
        if len(value) > 1024:
            raise BadQuery(f"{name} is longer than 1024 characters")
    return SearchQuery(
        fields=values,
        storefront=storefront,
        workflow=workflow,
        workflow_version=version,
        step=step,
        at_step_before=at_step_before,
        submitted_from=submitted_from,
        submitted_to=submitted_to,
        process_state=ProcessState(state_text) if state_text else None,
        waiting_for=waiting_for,
    )
