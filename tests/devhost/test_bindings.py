"""Reading the app: functions, triggers, settings expressions and host.json."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import azure.functions as func
import pytest

from devhost import ConfigurationError, FunctionSpec, TriggerKind, load_functions
from devhost.bindings import app_functions, describe_function, load_function_app, resolve_setting_expressions
from devhost.host_config import HostSettings, load_host_settings, parse_timespan
from tests.devhost.conftest import TOY_APP


def by_name(specs: list[FunctionSpec]) -> dict[str, FunctionSpec]:
    return {spec.name: spec for spec in specs}


def test_load_functions_describes_every_toy_function() -> None:
    specs = by_name(load_functions(TOY_APP))

    assert list(specs) == [
        "echo",
        "boom",
        "item",
        "text",
        "slow",
        "pool_hold",
        "pool_state",
        "pool_release",
        "work",
        "poison",
        "from_setting",
        "parallel",
        "slow_message",
        "hold",
        "tick",
    ]
    echo = specs["echo"]
    assert echo.trigger is TriggerKind.HTTP
    assert (echo.route, echo.methods, echo.arg_name, echo.auth_level) == (
        "echo/{name}",
        ("GET", "POST"),
        "req",
        "anonymous",
    )
    assert echo.is_async is False
    assert echo.other_bindings == ()
    assert specs["item"].is_async is True
    assert specs["text"].pass_context is True

    work = specs["work"]
    assert work.trigger is TriggerKind.SERVICE_BUS
    assert (work.queue_name, work.connection, work.arg_name, work.cardinality) == (
        "work",
        "ServiceBusConnection",
        "msg",
        "one",
    )
    assert specs["from_setting"].queue_name == "%QUEUE_FROM_SETTING%"
    assert specs["from_setting"].arg_name == "message"

    tick = specs["tick"]
    assert tick.trigger is TriggerKind.TIMER
    assert (tick.schedule, tick.run_on_startup, tick.arg_name) == ("%TOY_SCHEDULE%", False, "timer")
    assert callable(tick.func)


def test_load_functions_twice_reuses_the_app_and_its_functions() -> None:
    # get_functions() may run once per app object; a second load must not call it again.
    first = load_functions(TOY_APP)
    second = load_functions(TOY_APP)

    assert [s.name for s in first] == [s.name for s in second]
    app = load_function_app(TOY_APP)
    assert app_functions(app) is app_functions(app)


def test_a_directory_without_function_app_py_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"function_app\.py"):
        load_functions(tmp_path)


def test_a_module_without_a_function_app_object_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text("x = 1\n", encoding="utf-8")

    with pytest.raises(ConfigurationError, match=r"no azure\.functions\.FunctionApp"):
        load_functions(tmp_path)


def test_describe_function_reads_defaults_blueprints_and_extra_bindings() -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    blueprint = func.Blueprint()

    @blueprint.route()
    def no_route(req: func.HttpRequest) -> str:
        return "x"

    @app.function_name("renamed")
    @app.service_bus_queue_trigger(
        arg_name="msg", queue_name="q", connection="Conn", cardinality=func.Cardinality.MANY
    )
    @app.service_bus_queue_output(arg_name="out", queue_name="other", connection="Conn")
    def handler(msg: list[func.ServiceBusMessage], out: func.Out[str]) -> None:
        return None

    app.register_blueprint(blueprint)
    specs = by_name([describe_function(f) for f in app.get_functions()])

    route_default = specs["no_route"]
    assert route_default.route == "no_route"  # the host's default: the function name
    assert route_default.methods is None
    assert route_default.auth_level == "function"
    renamed = specs["renamed"]
    assert renamed.cardinality == "many"
    assert [(b.name, b.type, b.direction) for b in renamed.other_bindings] == [("out", "serviceBus", "out")]


def test_resolve_setting_expressions() -> None:
    env = {"QUEUE": "orders", "SUFFIX": "eu"}

    assert resolve_setting_expressions("%QUEUE%", env, "queue") == "orders"
    assert resolve_setting_expressions("%QUEUE%-%SUFFIX%", env, "queue") == "orders-eu"
    assert resolve_setting_expressions("plain", env, "queue") == "plain"
    with pytest.raises(ConfigurationError, match="MISSING, OTHER"):
        resolve_setting_expressions("%OTHER%/%MISSING%", env, "queue")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:05:00", timedelta(minutes=5)),
        ("01:00", timedelta(hours=1)),
        ("1.02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("00:00:00.5", timedelta(milliseconds=500)),
        ("PT5M", timedelta(minutes=5)),
        ("P1DT1H", timedelta(days=1, hours=1)),
        ("pt30s", timedelta(seconds=30)),
    ],
)
def test_parse_timespan(text: str, expected: timedelta) -> None:
    assert parse_timespan(text) == expected


@pytest.mark.parametrize("text", ["", "5 minutes", "PT", "P", "1:2:3:4"])
def test_parse_timespan_rejects_other_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timespan(text)


def test_host_settings_defaults_without_host_json(tmp_path: Path) -> None:
    assert load_host_settings(tmp_path, environ={}) == HostSettings(
        route_prefix="api", max_concurrent_calls=16, max_auto_lock_renewal_duration=timedelta(minutes=5)
    )


def test_host_settings_from_host_json_case_insensitively_with_overrides(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(
        json.dumps(
            {
                "version": "2.0",
                "Extensions": {
                    "HTTP": {"routePrefix": "/v1/"},
                    "serviceBus": {"MaxConcurrentCalls": 3, "maxAutoLockRenewalDuration": "00:01:30"},
                },
            }
        ),
        encoding="utf-8",
    )

    settings = load_host_settings(tmp_path, environ={})
    assert settings == HostSettings("v1", 3, timedelta(seconds=90))

    overridden = load_host_settings(
        tmp_path, environ={"AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls": "7"}
    )
    assert overridden.max_concurrent_calls == 7


def test_host_settings_empty_route_prefix_and_legacy_message_handler_options(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(
        json.dumps(
            {
                "extensions": {
                    "http": {"routePrefix": ""},
                    "serviceBus": {
                        "messageHandlerOptions": {"maxConcurrentCalls": 2, "maxAutoRenewDuration": "PT1M"}
                    },
                }
            }
        ),
        encoding="utf-8",
    )

    assert load_host_settings(tmp_path, environ={}) == HostSettings("", 2, timedelta(minutes=1))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "cannot read host.json"),
        ('{"extensions": {"serviceBus": {"maxConcurrentCalls": "many"}}}', "must be an integer"),
        ('{"extensions": {"serviceBus": {"maxConcurrentCalls": 0}}}', "at least 1"),
        (
            '{"extensions": {"serviceBus": {"maxAutoLockRenewalDuration": "soon"}}}',
            "maxAutoLockRenewalDuration",
        ),
    ],
)
def test_bad_host_json_is_a_configuration_error(tmp_path: Path, content: str, needle: str) -> None:
    (tmp_path / "host.json").write_text(content, encoding="utf-8")

    with pytest.raises(ConfigurationError, match=needle):
        load_host_settings(tmp_path, environ={})


def test_the_toy_host_json() -> None:
    assert load_host_settings(TOY_APP, environ={}) == HostSettings("api", 8, timedelta(minutes=5))
