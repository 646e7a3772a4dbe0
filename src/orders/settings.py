"""App settings (environment variables locally, app settings in Azure), read and validated once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, field_validator

from engine import EngineSettings, InputKey, Keyring, RetentionPolicy, parse_retention

from .catalog import CATALOG, SERVICES

# Where the Function App serves the simulators (simulators.hosted.ROUTE_PREFIX): a service URL whose
# path ends here gets SIMULATORS_KEY, and no other does, so the key never reaches a real service.
SIMULATORS_ROUTE = "/api/sim"


def _key(value: Any) -> InputKey:
    if isinstance(value, InputKey):
        return value
    return InputKey.parse(str(value))


def _keys(value: Any) -> tuple[InputKey, ...]:
    if isinstance(value, tuple | list):
        return tuple(_key(v) for v in value)
    return tuple(_key(part) for part in str(value or "").split(",") if part.strip())


# "<key id>:<base64 of 32 bytes>" (engine.sealing.InputKey.parse); an error names the setting, not the value.
InputKeySetting = Annotated[InputKey, PlainValidator(_key)]
InputKeysSetting = Annotated[tuple[InputKey, ...], PlainValidator(_keys)]


class Settings(BaseModel):
    """Every setting the code reads. Names are the app-setting names."""

    # An invalid value is not quoted in the error (the keys are secrets): the error names the setting.
    model_config = ConfigDict(populate_by_name=True, extra="ignore", hide_input_in_errors=True)

    step_complete_by_seconds: float = Field(default=30.0, gt=0, alias="STEP_COMPLETE_BY_SECONDS")
    supervisor_schedule: str = Field(default="*/10 * * * * *", alias="SUPERVISOR_SCHEDULE")
    supervisor_max_failures: int = Field(default=3, ge=1, alias="SUPERVISOR_MAX_FAILURES")
    supervisor_backoff_seconds: float = Field(default=2.0, gt=0, alias="SUPERVISOR_BACKOFF_SECONDS")
    supervisor_max_backoff_seconds: float = Field(default=60.0, gt=0, alias="SUPERVISOR_MAX_BACKOFF_SECONDS")
    cancel_grace_seconds: float = Field(default=1.0, ge=0, alias="CANCEL_GRACE_SECONDS")
    # An order waiting for a timer or an approval more than twice this long off is parked out of the live
    # records until about this long before it is due (engine.supervisor); 0: never.
    wait_park_horizon_seconds: float = Field(default=600.0, ge=0, alias="WAIT_PARK_HORIZON_SECONDS")
    # How often (seconds, at most) a process measures the queue and waiting gauges, after a Supervisor
    # sweep (orders.gauges); 0: after every sweep.
    metrics_gauge_seconds: float = Field(
        default=30.0, ge=0, allow_inf_nan=False, alias="METRICS_GAUGE_SECONDS"
    )
    # How long an Agent's circuit breaker stays open, for every step; empty: each step's own policy.
    breaker_reset_seconds: float | None = Field(default=None, gt=0, alias="BREAKER_RESET_SECONDS")
    # Table Storage: a connection string locally, or an endpoint with a managed identity in Azure.
    state_store_connection: str | None = Field(default=None, alias="STATE_STORE_CONNECTION")
    state_store_endpoint: str | None = Field(default=None, alias="STATE_STORE_ENDPOINT")
    state_table_name: str = Field(
        default="orders", alias="STATE_TABLE_NAME", pattern=r"^[A-Za-z][A-Za-z0-9]{2,62}$"
    )
    state_shards: int = Field(default=8, ge=1, le=100, alias="STATE_SHARDS")
    azure_client_id: str | None = Field(default=None, alias="AZURE_CLIENT_ID")
    # The key of the simulators the app hosts, sent as x-simulators-key (see service_keys).
    simulators_key: str | None = Field(default=None, alias="SIMULATORS_KEY", repr=False)
    # How long a finished order (Processed, Compensated) is kept, as an ISO 8601 duration; then it is
    # purged and its id refused for as long again (engine.retention).
    order_retention: str = Field(default="P30D", alias="ORDER_RETENTION")
    # What a submission's Location header and statusUrl start with: the address clients reach /api at
    # (https://<app>.azurewebsites.net, or a gateway's). Never the request's Host header, which the
    # client chooses. Empty: they are relative, /api/orders/<id>. Read at import (see public_base_url).
    public_base_url: str = Field(default="", alias="PUBLIC_BASE_URL")
    # The key that seals the input fields a workflow declares sensitive (engine.sealing), and the keys it
    # replaced, which still open what they sealed (rotation). From Key Vault in Azure; the devhost makes one
    # per data folder. Required while any deployed workflow declares a sensitive field (see load_settings).
    input_encryption_key: InputKeySetting | None = Field(
        default=None, alias="INPUT_ENCRYPTION_KEY", repr=False
    )
    input_encryption_previous_keys: InputKeysSetting = Field(
        default=(), alias="INPUT_ENCRYPTION_PREVIOUS_KEYS", repr=False
    )

    @field_validator("input_encryption_key", mode="before")
    @classmethod
    def _empty_key_is_unset(cls, value: object) -> object:
        return None if value is None or str(value).strip() == "" else value

    @field_validator("public_base_url", mode="before")
    @classmethod
    def _a_base_url(cls, value: object) -> object:
        text = "" if value is None else str(value).strip()
        if not text:
            return ""
        parts = urlsplit(text)
        try:
            port = parts.port  # a ValueError for a port that is not a number from 0 to 65535
        except ValueError:
            raise ValueError(f"{text!r} has an invalid port") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            raise ValueError(f"{text!r} is not an absolute http(s) URL, e.g. https://orders.example.com")
        if parts.username is not None or parts.query or parts.fragment:
            raise ValueError(f"{text!r} must have no user, query or fragment")
        return text.rstrip("/")

    @field_validator("breaker_reset_seconds", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("order_retention", mode="before")
    @classmethod
    def _a_duration(cls, value: object) -> object:
        if value == "" or value is None:
            return "P30D"
        parse_retention(str(value))  # a ValueError names what is wrong
        return value

    def retention(self) -> RetentionPolicy:
        """How long finished orders are kept, and the clean-up's bounds."""
        return RetentionPolicy(retention=parse_retention(self.order_retention))

    def engine(self) -> EngineSettings:
        """The engine's timing knobs."""
        return EngineSettings(
            step_complete_by_seconds=self.step_complete_by_seconds,
            supervisor_max_failures=self.supervisor_max_failures,
            backoff_base_seconds=self.supervisor_backoff_seconds,
            backoff_max_seconds=self.supervisor_max_backoff_seconds,
            cancel_grace_seconds=self.cancel_grace_seconds,
            wait_seconds=dict(self.wait_seconds),
            park_horizon_seconds=self.wait_park_horizon_seconds,
            input_keys=self.keyring(),
        )

    def keyring(self) -> Keyring | None:
        """The keys of the sensitive input fields (None when INPUT_ENCRYPTION_KEY is not set)."""
        if self.input_encryption_key is None:
            return None
        return Keyring(self.input_encryption_key, self.input_encryption_previous_keys)

    # Base URL per service, from each declared service's <NAME>_SERVICE_URL (see load_settings).
    service_urls: dict[str, str] = Field(default_factory=dict, exclude=True)
    # The durations of the waits that name a setting (WAIT_SETTINGS), where set (see load_settings).
    wait_seconds: dict[str, float] = Field(default_factory=dict, exclude=True)

    @property
    def service_keys(self) -> dict[str, str]:
        """The simulators key to send, per agent whose service is the hosted simulators (none if unset)."""
        if not self.simulators_key:
            return {}
        return {
            agent: self.simulators_key
            for agent, url in self.service_urls.items()
            if urlsplit(url).path.rstrip("/").lower().endswith(SIMULATORS_ROUTE)
        }


# One URL setting per declared service, e.g. INVENTORY_SERVICE_URL.
SERVICE_URL_SETTINGS = {service.name: service.url_setting for service in SERVICES}
# The settings the catalog's waits name (a timer's duration, an approval's deadline, in seconds).
WAIT_SETTINGS = tuple(CATALOG.wait_settings())
# The sensitive input fields of the deployed workflows (engine.workflow.sensitive): with any, the app needs
# INPUT_ENCRYPTION_KEY.
SENSITIVE_INPUTS = sorted({f"{w.name}.{name}" for w in CATALOG.workflows for name in w.sensitive})
# Names as a constant, for the checks that compare them with the Bicep and the sample settings.
SETTING_NAMES = (
    *(field.alias for field in Settings.model_fields.values() if field.alias),
    *SERVICE_URL_SETTINGS.values(),
    *WAIT_SETTINGS,
)


def public_base_url(environ: Mapping[str, str] | None = None) -> str:
    """PUBLIC_BASE_URL, checked as :class:`Settings` checks it, without a trailing slash; "" when unset.

    Read on its own, at import by ``function_app.py``: the submission route needs it before (and
    without) the rest of the settings. Raises RuntimeError naming what is wrong.
    """
    source = os.environ if environ is None else environ
    name = Settings.model_fields["public_base_url"].alias
    assert name is not None
    try:
        return Settings.model_validate({name: source.get(name, "")}).public_base_url
    except ValidationError as exc:
        raise RuntimeError(f"invalid app settings:\n{exc}") from exc


def store_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings a tool of the deployment needs to reach the state store (the formats switch, the
    backfills): no service URLs or keys; raise RuntimeError naming what is missing or wrong."""
    try:
        settings = Settings.model_validate(dict(os.environ if environ is None else environ))
    except ValidationError as exc:
        raise RuntimeError(f"invalid settings:\n{exc}") from exc
    if not settings.state_store_connection and not settings.state_store_endpoint:
        raise RuntimeError("set STATE_STORE_CONNECTION or STATE_STORE_ENDPOINT")
    return settings


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings; raise RuntimeError naming what is missing or wrong."""
    source = dict(os.environ if environ is None else environ)
    missing = [name for name in SERVICE_URL_SETTINGS.values() if not source.get(name)]
    if missing:
        raise RuntimeError(f"invalid app settings: set {', '.join(missing)} (the base URL of each service)")
    try:
        settings = Settings.model_validate(source)
    except ValidationError as exc:
        raise RuntimeError(f"invalid app settings:\n{exc}") from exc
    settings.service_urls = {service: source[name] for service, name in SERVICE_URL_SETTINGS.items()}
    settings.wait_seconds = _wait_seconds(source)
    if not settings.state_store_connection and not settings.state_store_endpoint:
        raise RuntimeError(
            "set STATE_STORE_CONNECTION (connection string) or STATE_STORE_ENDPOINT (with an identity)"
        )
    if settings.input_encryption_key is None and SENSITIVE_INPUTS:
        raise RuntimeError(
            f"invalid app settings: set INPUT_ENCRYPTION_KEY (<key id>:<base64 of 32 random bytes>): "
            f"the workflows declare sensitive input fields ({', '.join(SENSITIVE_INPUTS)}), stored sealed"
        )
    try:
        settings.keyring()
    except ValueError as exc:  # a previous key with the current key's id
        raise RuntimeError(f"invalid app settings: INPUT_ENCRYPTION_PREVIOUS_KEYS: {exc}") from exc
    return settings


def _wait_seconds(source: Mapping[str, str]) -> dict[str, float]:
    """The waits' durations that are set (empty: the declared duration); RuntimeError for a bad one."""
    found: dict[str, float] = {}
    for name in WAIT_SETTINGS:
        text = source.get(name, "").strip()
        if not text:
            continue
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds < float("inf"):
            raise RuntimeError(f"invalid app settings: {name} must be a number of seconds, 0 or more")
        found[name] = seconds
    return found


# One secret per service whose resources answer later: their callbacks are signed with it. Like
# SUBMISSION_KEY, made once in Azure by the predeploy hook (never a Bicep parameter or output), by the
# devhost locally; not among SETTING_NAMES, which Bicep sets.
CALLBACK_SECRET_SETTINGS = {
    service.name: service.callback_secret_setting for service in SERVICES if service.callback_secret_setting
}


def callback_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The callback secret of each service that answers later, where set (a service without one gets its
    callbacks refused: 404)."""
    source = os.environ if environ is None else environ
    return {
        name: source[setting] for name, setting in CALLBACK_SECRET_SETTINGS.items() if source.get(setting)
    }
