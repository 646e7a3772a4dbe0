"""Which remote services get SIMULATORS_KEY: only the simulators a Function App hosts under /api/sim."""

from __future__ import annotations

from orders.settings import SIMULATORS_ROUTE, load_settings
from simulators.hosted import ROUTE_PREFIX

BASE = {"STATE_STORE_CONNECTION": "UseDevelopmentStorage=true"}


def test_the_route_is_the_one_the_app_serves_the_simulators_under() -> None:
    assert SIMULATORS_ROUTE == ROUTE_PREFIX


def test_the_key_goes_only_to_the_hosted_simulators() -> None:
    settings = load_settings(
        {
            **BASE,
            "INVENTORY_SERVICE_URL": "https://func-api-x.azurewebsites.net/api/sim",
            "PAYMENT_SERVICE_URL": "https://payments.example.com/v1",
            "SHIPPING_SERVICE_URL": "http://127.0.0.1:7071/api/sim/",
            "SIMULATORS_KEY": "key-4f1c",
        }
    )
    assert settings.service_keys == {"inventory": "key-4f1c", "shipping": "key-4f1c"}
    assert "key-4f1c" not in repr(settings), "the key stays out of log lines"


def test_no_key_is_sent_when_none_is_set() -> None:
    urls = dict.fromkeys(
        ("INVENTORY_SERVICE_URL", "PAYMENT_SERVICE_URL", "SHIPPING_SERVICE_URL"), "http://h/api/sim"
    )
    assert load_settings({**BASE, **urls}).service_keys == {}
    assert load_settings({**BASE, **urls, "SIMULATORS_KEY": ""}).service_keys == {}
