"""Timer schedules and the timer host's run rules, in process."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import azure.functions as func
import pytest

from devhost import ConfigurationError
from devhost.bindings import describe_function
from devhost.invocation import Invoker
from devhost.timer_host import TimerHost, parse_schedule


def test_six_field_ncrontab_with_seconds() -> None:
    schedule = parse_schedule("*/15 * * * * *", environ={})
    start = datetime(2030, 1, 1, 12, 0, 7, 250000, tzinfo=UTC)

    assert schedule.next_after(start) == datetime(2030, 1, 1, 12, 0, 15, tzinfo=UTC)
    assert schedule.next_after(datetime(2030, 1, 1, 12, 0, 15, tzinfo=UTC)) == datetime(
        2030, 1, 1, 12, 0, 30, tzinfo=UTC
    )


def test_day_of_week_and_hours() -> None:
    schedule = parse_schedule("0 30 9 * * 1-5", environ={})  # 09:30:00 on weekdays

    saturday = datetime(2030, 1, 5, 10, 0, tzinfo=UTC)
    assert schedule.next_after(saturday) == datetime(2030, 1, 7, 9, 30, tzinfo=UTC)


def test_schedule_from_an_app_setting_and_time_zone() -> None:
    schedule = parse_schedule(
        "%SCHEDULE%", environ={"SCHEDULE": "0 0 9 * * *", "WEBSITE_TIME_ZONE": "Europe/Paris"}
    )

    # 09:00 in Paris in January is 08:00 UTC.
    assert schedule.next_after(datetime(2030, 1, 1, tzinfo=UTC)) == datetime(2030, 1, 1, 8, 0, tzinfo=UTC)


def test_timespan_interval() -> None:
    schedule = parse_schedule("00:00:30", environ={})
    start = datetime(2030, 1, 1, tzinfo=UTC)

    assert schedule.next_after(start) == start + timedelta(seconds=30)


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("* * * * *", "has 5 fields"),
        ("99 * * * * *", "not a valid NCRONTAB"),
        ("%NOT_SET%", "NOT_SET"),
        ("00:00:00", "must be positive"),
    ],
)
def test_bad_schedules_are_configuration_errors(expression: str, needle: str) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        parse_schedule(expression, environ={})


def test_runs_never_overlap_and_a_failure_keeps_the_schedule() -> None:
    # Each run takes 1.3 s on a 1 s schedule and every other run raises: runs must follow one another.
    app = func.FunctionApp()
    state = {"running": 0, "most": 0, "runs": 0}
    lock = threading.Lock()

    @app.timer_trigger(schedule="*/1 * * * * *", arg_name="timer", run_on_startup=True)
    def busy(timer: func.TimerRequest) -> None:
        with lock:
            state["running"] += 1
            state["runs"] += 1
            state["most"] = max(state["most"], state["running"])
            number = state["runs"]
        time.sleep(1.3)  # the work: a run longer than the one-second period, not a wait
        with lock:
            state["running"] -= 1
        if number % 2:
            raise RuntimeError("odd run fails")

    (spec,) = [describe_function(function) for function in app.get_functions()]

    async def scenario() -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            host = TimerHost([spec], Invoker(pool, Path(".")), environ={})
            host.start()
            deadline = time.monotonic() + 10
            while state["runs"] < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # polling shared state from the loop; no event to wait on
            host.stop()
            await host.wait_stopped()

    asyncio.run(scenario())

    assert state["runs"] >= 3  # the startup run, then the schedule despite failures
    assert state["most"] == 1
