"""App settings: what is required, what is defaulted, and how they reach the engine."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.sealing import InputKey, Keyring
from orders.catalog import CATALOG, SERVICES
from orders.settings import SETTING_NAMES, load_settings, public_base_url
from tests.support import INPUT_KEY

# One URL setting per declared service (``<NAME>_SERVICE_URL``), each with a URL of its own.
REQUIRED = {
    **{service.url_setting: f"http://{service.name}" for service in SERVICES},
    "STATE_STORE_CONNECTION": "UseDevelopmentStorage=true",
    **INPUT_KEY,
}


def test_defaults_reach_the_engine() -> None:
    engine = load_settings(REQUIRED).engine()
    assert (engine.step_complete_by_seconds, engine.supervisor_max_failures) == (30.0, 3)
    assert (engine.backoff_base_seconds, engine.backoff_max_seconds, engine.cancel_grace_seconds) == (
        2,
        60,
        1,
    )


def test_every_timing_setting_reaches_the_engine() -> None:
    settings = load_settings(
        {
            **REQUIRED,
            "STEP_COMPLETE_BY_SECONDS": "5",
            "SUPERVISOR_MAX_FAILURES": "7",
            "SUPERVISOR_BACKOFF_SECONDS": "0.5",
            "SUPERVISOR_MAX_BACKOFF_SECONDS": "9",
            "CANCEL_GRACE_SECONDS": "0",
        }
    )
    engine = settings.engine()
    assert engine.step_complete_by_seconds == 5 and engine.supervisor_max_failures == 7
    assert engine.backoff_base_seconds == 0.5 and engine.backoff_max_seconds == 9
    assert engine.cancel_grace_seconds == 0


def test_service_urls_are_keyed_by_the_workflows_agents() -> None:
    urls = load_settings(REQUIRED).service_urls
    assert set(urls) == set(CATALOG.agents)
    assert urls == {service.name: f"http://{service.name}" for service in SERVICES}


def test_missing_or_bad_settings_are_named() -> None:
    for service in SERVICES:
        without_url = {k: v for k, v in REQUIRED.items() if k != service.url_setting}
        with pytest.raises(RuntimeError, match=service.url_setting):
            load_settings(without_url)
    with pytest.raises(RuntimeError, match="CANCEL_GRACE_SECONDS"):
        load_settings({**REQUIRED, "CANCEL_GRACE_SECONDS": "-1"})
    with pytest.raises(RuntimeError, match="STATE_SHARDS"):
        load_settings({**REQUIRED, "STATE_SHARDS": "0"})


def test_a_state_store_is_required() -> None:
    no_store = {k: v for k, v in REQUIRED.items() if k != "STATE_STORE_CONNECTION"}
    with pytest.raises(RuntimeError, match="STATE_STORE_CONNECTION"):
        load_settings(no_store)
    assert load_settings({**no_store, "STATE_STORE_ENDPOINT": "https://a.table.core.windows.net"})


def test_setting_names_are_the_app_setting_names() -> None:
    assert "CANCEL_GRACE_SECONDS" in SETTING_NAMES and "STEP_COMPLETE_BY_SECONDS" in SETTING_NAMES


def test_order_retention_is_an_iso_8601_duration_thirty_days_by_default() -> None:
    assert load_settings(REQUIRED).retention().retention == timedelta(days=30)
    assert load_settings({**REQUIRED, "ORDER_RETENTION": ""}).retention().retention == timedelta(days=30)
    policy = load_settings({**REQUIRED, "ORDER_RETENTION": "PT20S"}).retention()
    assert policy.retention == policy.tombstone_period == timedelta(seconds=20)
    for bad in ("30", "P1M", "PT0S"):
        with pytest.raises(RuntimeError, match="ORDER_RETENTION"):
            load_settings({**REQUIRED, "ORDER_RETENTION": bad})
    assert "ORDER_RETENTION" in SETTING_NAMES


def test_the_public_base_url_is_an_absolute_http_url_and_empty_by_default() -> None:
    assert "PUBLIC_BASE_URL" in SETTING_NAMES
    assert public_base_url({}) == public_base_url({"PUBLIC_BASE_URL": " "}) == ""  # relative links
    assert load_settings(REQUIRED).public_base_url == ""
    for given, kept in (
        ("https://func-x.azurewebsites.net", "https://func-x.azurewebsites.net"),
        ("https://orders.example.com/", "https://orders.example.com"),
        ("http://127.0.0.1:7071", "http://127.0.0.1:7071"),
        ("https://gateway.example.com/orders/", "https://gateway.example.com/orders"),
    ):
        assert public_base_url({"PUBLIC_BASE_URL": given}) == kept
        assert load_settings({**REQUIRED, "PUBLIC_BASE_URL": given}).public_base_url == kept
    for bad in (
        "evil.example",
        "/api",
        "ftp://orders.example.com",
        "https://",
        "https://user:secret@orders.example.com",
        "https://orders.example.com?x=1",
        "https://orders.example.com#top",
        "https://orders.example.com:99999",
    ):
        with pytest.raises(RuntimeError, match="PUBLIC_BASE_URL"):
            public_base_url({"PUBLIC_BASE_URL": bad})
        with pytest.raises(RuntimeError, match="PUBLIC_BASE_URL"):
            load_settings({**REQUIRED, "PUBLIC_BASE_URL": bad})


def test_the_input_encryption_keys_are_required_checked_and_reach_the_engine() -> None:
    without = {k: v for k, v in REQUIRED.items() if k != "INPUT_ENCRYPTION_KEY"}
    with pytest.raises(RuntimeError, match=r"set INPUT_ENCRYPTION_KEY.*paymentToken"):
        load_settings(without)  # the declared workflows have a sensitive input field
    with pytest.raises(RuntimeError, match="set INPUT_ENCRYPTION_KEY"):
        load_settings({**without, "INPUT_ENCRYPTION_KEY": " "})
    current, older = InputKey.generate("k2"), InputKey.generate("k1")
    engine = load_settings(
        {
            **REQUIRED,
            "INPUT_ENCRYPTION_KEY": current.text(),
            "INPUT_ENCRYPTION_PREVIOUS_KEYS": f"{older.text()}, ",
        }
    ).engine()
    assert engine.input_keys == Keyring(current, (older,))
    secret = current.text().partition(":")[2]
    for name, value, problem in (
        ("INPUT_ENCRYPTION_KEY", secret, "key id"),
        ("INPUT_ENCRYPTION_KEY", "k2:" + secret[:-4], "bytes"),
        ("INPUT_ENCRYPTION_PREVIOUS_KEYS", f"{older.text()},k0:{secret}x", "base64"),
        ("INPUT_ENCRYPTION_PREVIOUS_KEYS", current.text(), "once"),
    ):
        with pytest.raises(RuntimeError, match=f"{name}(.|\n)*{problem}") as refused:
            load_settings({**REQUIRED, "INPUT_ENCRYPTION_KEY": current.text(), name: value})
        assert secret[:20] not in str(refused.value), "the error quotes the key"
    assert secret not in repr(load_settings({**REQUIRED, "INPUT_ENCRYPTION_KEY": current.text()}))
