"""The parts of ``host.json`` the worker honours, with the app-setting overrides the Functions host applies.

The host reads host.json keys case-insensitively, and an app setting named
``AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls`` overrides the matching key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from devhost.errors import ConfigurationError

DEFAULT_ROUTE_PREFIX = "api"
DEFAULT_MAX_CONCURRENT_CALLS = 16
DEFAULT_MAX_AUTO_LOCK_RENEWAL = timedelta(minutes=5)

_OVERRIDE_PREFIX = "AzureFunctionsJobHost__"
# .NET TimeSpan text as host.json uses it: [-][d.]hh:mm[:ss[.fffffff]]
_TIMESPAN = re.compile(
    r"^(?:(?P<days>\d+)\.)?(?P<hours>\d+):(?P<minutes>\d+)(?::(?P<seconds>\d+(?:\.\d+)?))?$"
)
# ISO 8601 durations (PT5M, P1DT2H, PT0.5S)
_ISO_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HostSettings:
    """host.json settings that change how triggers are served."""

    route_prefix: str = DEFAULT_ROUTE_PREFIX
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    max_auto_lock_renewal_duration: timedelta = DEFAULT_MAX_AUTO_LOCK_RENEWAL


def parse_timespan(value: str) -> timedelta:
    """Parse a host.json duration: ``"00:05:00"``, ``"1.02:00:00"`` (TimeSpan) or ``"PT5M"`` (ISO 8601).

    Raises ValueError for anything else.
    """
    text = value.strip()
    match = _TIMESPAN.match(text)
    if match:
        parts = match.groupdict()
        return timedelta(
            days=int(parts["days"] or 0),
            hours=int(parts["hours"]),
            minutes=int(parts["minutes"]),
            seconds=float(parts["seconds"] or 0),
        )
    match = _ISO_DURATION.match(text)
    if match and text.upper() not in ("P", "PT"):
        parts = match.groupdict()
        return timedelta(
            days=float(parts["days"] or 0),
            hours=float(parts["hours"] or 0),
            minutes=float(parts["minutes"] or 0),
            seconds=float(parts["seconds"] or 0),
        )
    raise ValueError(f"not a duration: {value!r} (use hh:mm:ss, d.hh:mm:ss or ISO 8601 such as PT5M)")


def _lookup(data: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in nested dicts, matching keys case-insensitively; None if absent."""
    node = data
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = next((value for name, value in node.items() if name.lower() == key.lower()), None)
        if node is None:
            return None
    return node


def _override(environ: Mapping[str, str], path: tuple[str, ...]) -> str | None:
    wanted = (_OVERRIDE_PREFIX + "__".join(path)).lower()
    return next((value for name, value in environ.items() if name.lower() == wanted), None)


def _setting(data: Any, environ: Mapping[str, str], *paths: tuple[str, ...]) -> Any:
    """The first value found for any of ``paths`` (app-setting override first, then host.json)."""
    for path in paths:
        overridden = _override(environ, path)
        if overridden is not None:
            return overridden
        value = _lookup(data, path)
        if value is not None:
            return value
    return None


def read_host_json(app_dir: Path) -> dict[str, Any]:
    """The parsed ``host.json`` of the app, or ``{}`` if there is none."""
    path = app_dir / "host.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: cannot read host.json: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path}: host.json must hold a JSON object")
    return data


def load_host_settings(app_dir: str | Path, environ: Mapping[str, str] | None = None) -> HostSettings:
    """Read the app's host.json (and ``AzureFunctionsJobHost__*`` overrides) into :class:`HostSettings`."""
    env = os.environ if environ is None else environ
    data = read_host_json(Path(app_dir))
    where = Path(app_dir) / "host.json"

    prefix = _setting(data, env, ("extensions", "http", "routePrefix"))
    route_prefix = DEFAULT_ROUTE_PREFIX if prefix is None else str(prefix).strip().strip("/")

    # Extension v5 keys first, then the v2-v4 messageHandlerOptions shape.
    calls = _setting(
        data,
        env,
        ("extensions", "serviceBus", "maxConcurrentCalls"),
        ("extensions", "serviceBus", "messageHandlerOptions", "maxConcurrentCalls"),
    )
    try:
        max_calls = DEFAULT_MAX_CONCURRENT_CALLS if calls is None else int(calls)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{where}: serviceBus maxConcurrentCalls must be an integer: {calls!r}"
        ) from exc
    if max_calls < 1:
        raise ConfigurationError(
            f"{where}: serviceBus maxConcurrentCalls must be at least 1, not {max_calls}"
        )

    renewal = _setting(
        data,
        env,
        ("extensions", "serviceBus", "maxAutoLockRenewalDuration"),
        ("extensions", "serviceBus", "messageHandlerOptions", "maxAutoRenewDuration"),
    )
    try:
        max_renewal = DEFAULT_MAX_AUTO_LOCK_RENEWAL if renewal is None else parse_timespan(str(renewal))
    except ValueError as exc:
        raise ConfigurationError(f"{where}: serviceBus maxAutoLockRenewalDuration: {exc}") from exc

    return HostSettings(
        route_prefix=route_prefix,
        max_concurrent_calls=max_calls,
        max_auto_lock_renewal_duration=max_renewal,
    )
