"""Queue configuration read from a file in the official Service Bus emulator's ``Config.json`` shape.

One file configures both this emulator and Microsoft's Docker image, so the queue properties a
developer tests against locally are the ones the official emulator (and the Bicep) use too.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import isodate
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says why."""


def _iso_duration(value: object) -> object:
    """Accept ISO 8601 durations such as ``PT1M`` or ``P14D``, as the official config does."""
    if isinstance(value, str):
        try:
            parsed = isodate.parse_duration(value)
        except isodate.ISO8601Error as exc:
            raise ValueError(f"not an ISO 8601 duration: {value!r}") from exc
        if not isinstance(parsed, timedelta):
            # Years and months have no fixed length; Service Bus does not accept them either.
            raise ValueError(f"duration must be in days, hours, minutes or seconds: {value!r}")
        return parsed
    return value


Duration = Annotated[timedelta, BeforeValidator(_iso_duration)]


class QueueProperties(BaseModel):
    """The queue properties this emulator honours. Others in the file are accepted and ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    lock_duration: Duration = Field(default=timedelta(minutes=1), alias="LockDuration")
    max_delivery_count: int = Field(default=10, ge=1, alias="MaxDeliveryCount")
    default_message_time_to_live: Duration = Field(
        default=timedelta(hours=1), alias="DefaultMessageTimeToLive"
    )
    dead_lettering_on_message_expiration: bool = Field(
        default=False, alias="DeadLetteringOnMessageExpiration"
    )
    requires_duplicate_detection: bool = Field(default=False, alias="RequiresDuplicateDetection")
    duplicate_detection_history_time_window: Duration = Field(
        default=timedelta(minutes=10), alias="DuplicateDetectionHistoryTimeWindow"
    )
    requires_session: bool = Field(default=False, alias="RequiresSession")

    @field_validator(
        "lock_duration", "default_message_time_to_live", "duplicate_detection_history_time_window"
    )
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value

    @field_validator("requires_session")
    @classmethod
    def _no_sessions(cls, value: bool) -> bool:
        if value:
            raise ValueError("session-enabled queues are not supported by this emulator")
        return value


class QueueConfig(BaseModel):
    """One queue: its name and properties."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(alias="Name", min_length=1, max_length=260, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")
    properties: QueueProperties = Field(default_factory=QueueProperties, alias="Properties")


class NamespaceConfig(BaseModel):
    """The single namespace of the emulator."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(alias="Name")
    queues: list[QueueConfig] = Field(default_factory=list, alias="Queues")


class UserConfig(BaseModel):
    """The ``UserConfig`` object at the top of the file."""

    model_config = ConfigDict(extra="ignore")

    namespaces: list[NamespaceConfig] = Field(alias="Namespaces", min_length=1, max_length=1)


class EmulatorConfig(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="ignore")

    user_config: UserConfig = Field(alias="UserConfig")

    @property
    def namespace(self) -> NamespaceConfig:
        """The one namespace the file declares."""
        return self.user_config.namespaces[0]

    @property
    def queues(self) -> dict[str, QueueProperties]:
        """Queue properties by queue name (Service Bus entity names are case-insensitive)."""
        return {q.name.lower(): q.properties for q in self.namespace.queues}


def load_config(path: str | Path) -> EmulatorConfig:
    """Read and validate a config file; raise :class:`ConfigError` with a readable reason."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    try:
        config = EmulatorConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a valid emulator config:\n{exc}") from exc
    names = [q.name.lower() for q in config.namespace.queues]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{path} declares these queues more than once: {', '.join(duplicates)}")
    return config
