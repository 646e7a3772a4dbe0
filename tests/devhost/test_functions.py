"""Reading the app: the functions azure-functions-runtime indexes, settings expressions and host.json."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.functions import FunctionRegister

from devhost import ConfigurationError, FunctionSpec, TriggerKind, load_functions
from devhost.functions import index, resolve_setting_expressions
from devhost.host_config import HostSettings, load_host_settings, parse_timespan
from devhost.language_worker import AppLoadError, LanguageWorker, raw_bindings
from tests.devhost.conftest import TOY_APP

ROOT = Path(__file__).resolve().parents[2]


def by_name(specs: list[FunctionSpec]) -> dict[str, FunctionSpec]:
    return {spec.name: spec for spec in specs}


def declared(app_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """What the app declares: its own FunctionApp's functions and bindings, from a fresh import of the file
    (a second app object, so the runtime's copy is not asked twice)."""
    spec = importlib.util.spec_from_file_location(f"declared_{app_dir.name}", app_dir / "function_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (app,) = [value for value in vars(module).values() if isinstance(value, FunctionRegister)]
    return {
        str(function.get_function_name()): [json.loads(raw) for raw in function.get_raw_bindings()]
        for function in app.get_functions()
    }


@pytest.mark.parametrize("app_dir", [TOY_APP, ROOT], ids=["toy app", "function_app.py"])
def test_the_metadata_the_runtime_indexes_is_what_the_app_declares(app_dir: Path) -> None:
    async def indexed() -> dict[str, list[dict[str, Any]]]:
        worker = LanguageWorker(app_dir)
        try:
            metadata = await worker.start()
        finally:
            worker.stop()
        assert len({m.function_id for m in metadata}) == len(metadata)
        assert all(m.language == "python" and m.properties["worker_indexed"] == "True" for m in metadata)
        return {m.name: raw_bindings(m) for m in metadata}

    expected = declared(app_dir)
    assert asyncio.run(indexed()) == expected
    assert [spec.name for spec in load_functions(app_dir)] == list(expected)


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
    assert echo.other_bindings == ()
    assert echo.function_id

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


def test_load_functions_twice_indexes_the_app_once() -> None:
    # get_functions() may run once per app object; a second load must not index again.
    first = load_functions(TOY_APP)
    second = load_functions(TOY_APP)

    assert first == second


def test_a_directory_without_function_app_py_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"function_app\.py"):
        load_functions(tmp_path)


def test_a_module_without_a_function_app_object_fails_as_the_runtime_reports_it(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text("x = 1\n", encoding="utf-8")

    with pytest.raises(AppLoadError, match="Could not find top level function app instances"):
        load_functions(tmp_path)


def test_specs_read_defaults_blueprints_and_extra_bindings(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text(
        textwrap.dedent(
            """
            import typing

            import azure.functions as func

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
            def handler(msg: typing.List[func.ServiceBusMessage], out: func.Out[str]) -> None:
                return None


            app.register_blueprint(blueprint)
            """
        ),
        encoding="utf-8",
    )
    specs = by_name(asyncio_run_index(tmp_path))

    route_default = specs["no_route"]
    assert route_default.route == "no_route"  # the default: the function name
    assert route_default.methods is None
    assert route_default.auth_level == "function"
    renamed = specs["renamed"]
    assert renamed.cardinality == "many"
    assert [(b.name, b.type, b.direction) for b in renamed.other_bindings] == [("out", "serviceBus", "out")]


def test_an_annotation_the_runtime_refuses_fails_the_start_as_in_azure(tmp_path: Path) -> None:
    # The worker's own check, which a local imitation of it did not make: `list[...]` is not a type to it.
    (tmp_path / "function_app.py").write_text(
        textwrap.dedent(
            """
            import azure.functions as func

            app = func.FunctionApp()


            @app.service_bus_queue_trigger(
                arg_name="msg", queue_name="q", connection="Conn", cardinality=func.Cardinality.MANY
            )
            def handler(msg: list[func.ServiceBusMessage]) -> None:
                return None
            """
        ),
        encoding="utf-8",
    )

    with pytest.raises(AppLoadError, match="binding msg has invalid non-type annotation"):
        asyncio_run_index(tmp_path)


def asyncio_run_index(app_dir: Path) -> list[FunctionSpec]:
    return asyncio.run(index(app_dir))


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
