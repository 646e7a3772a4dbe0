"""Which remote services get SIMULATORS_KEY: only the simulators a Function App hosts under /api/sim."""

from __future__ import annotations

from orders.catalog import SERVICES
from orders.settings import SIMULATORS_ROUTE, load_settings
from simulators.hosted import ROUTE_PREFIX
from tests.support import INPUT_KEY

BASE = {"STATE_STORE_CONNECTION": "UseDevelopmentStorage=true", **INPUT_KEY}


def test_the_route_is_the_one_the_app_serves_the_simulators_under() -> None:
    assert SIMULATORS_ROUTE == ROUTE_PREFIX


# Where each declared service may be: the hosted simulators (in Azure or locally, with a trailing slash)
# or a real service elsewhere, in turn.
URLS = (
    "https://func-api-x.azurewebsites.net/api/sim",
    "https://service.example.com/v1",
    "http://127.0.0.1:7071/api/sim/",
)


def test_the_key_goes_only_to_the_hosted_simulators() -> None:
    where = {service: URLS[index % len(URLS)] for index, service in enumerate(SERVICES)}
    settings = load_settings(
        {**BASE, **{s.url_setting: url for s, url in where.items()}, "SIMULATORS_KEY": "key-4f1c"}
    )
    hosted = {s.name: "key-4f1c" for s, url in where.items() if url != URLS[1]}
    assert hosted, "at least one service on the hosted simulators"
    assert settings.service_keys == hosted
    assert "key-4f1c" not in repr(settings), "the key stays out of log lines"


def test_no_key_is_sent_when_none_is_set() -> None:
    urls = {service.url_setting: "http://h/api/sim" for service in SERVICES}
    assert load_settings({**BASE, **urls}).service_keys == {}
    assert load_settings({**BASE, **urls, "SIMULATORS_KEY": ""}).service_keys == {}
