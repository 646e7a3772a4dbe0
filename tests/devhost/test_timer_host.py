"""Timer schedules and the timer host's run rules, in process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from devhost import ConfigurationError
from devhost.functions import describe
from devhost.language_worker import LanguageWorker
from devhost.timer_host import SingletonLocks, TimerHost, parse_schedule
from tests.devhost import inline_app


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


def test_runs_never_overlap_and_a_failure_keeps_the_schedule(tmp_path: Path) -> None:
    # Each run takes 1.3 s on a 1 s schedule and every other run raises: runs must follow one another.
    app = func.FunctionApp()
    state = {"running": 0, "most": 0, "runs": 0}
    seen: list[func.TimerRequest] = []
    lock = threading.Lock()

    @app.timer_trigger(schedule="*/1 * * * * *", arg_name="timer", run_on_startup=True)
    def busy(timer: func.TimerRequest) -> None:
        seen.append(timer)
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

    inline_app.write_app(tmp_path, app)
    worker = LanguageWorker(tmp_path)

    async def scenario() -> dict[str, Any]:
        (spec,) = [describe(metadata) for metadata in await worker.start()]
        host = TimerHost([spec], worker, environ={})
        host.start()
        deadline = time.monotonic() + 10
        while state["runs"] < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling shared state from the loop; no event to wait on
        host.stop()
        await host.wait_stopped()
        return dict(worker.failures)

    try:
        failures = asyncio.run(scenario())
    finally:
        worker.stop()

    assert state["runs"] >= 3  # the startup run, then the schedule despite failures
    assert state["most"] == 1
    assert failures == {"busy": (state["runs"] + 1) // 2}
    # The runtime built each TimerRequest from the host's TimerInfo document.
    first = seen[0]
    assert not first.past_due and set(first.schedule_status) == {"Last", "Next", "LastUpdated"}
    assert first.schedule == {"AdjustForDST": True}
    status = {key: datetime.fromisoformat(value) for key, value in first.schedule_status.items()}
    assert status["Last"] < status["Next"]


def test_each_timer_runs_on_one_worker_until_that_worker_ends(tmp_path: Path) -> None:
    """Azure runs a timer function on one instance at a time: the stack's workers share a lock per function,
    kept by the first to take it and freed when its process ends, however it ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from devhost.timer_host import SingletonLocks; "
            f"assert SingletonLocks({str(tmp_path)!r}).held('supervisor'); print('held', flush=True); "
            "time.sleep(300)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        here = SingletonLocks(str(tmp_path))
        assert not here.held("supervisor")  # the other worker's
        assert here.held("retention")  # each function's lock is its own
        holder.kill()
        holder.wait(timeout=10)
        assert here.held("supervisor")  # freed with the process that held it
        assert not SingletonLocks(str(tmp_path)).held("retention")
    finally:
        holder.kill()
        holder.wait(timeout=10)
