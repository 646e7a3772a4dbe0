"""Timer triggers: six-field NCRONTAB schedules (seconds first) or TimeSpan intervals.

As in Azure, each timer function runs on one worker at a time: Azure's host holds a lease per function;
here the workers of one stack share a folder (``DEVHOST_TIMER_LOCKS``) with a file per function, and the
worker holding its lock fires it. The lock is held until the worker ends, so a worker that dies (or is
killed) hands its timers to another at that one's next occurrence. Without the setting every worker fires
every timer.

Schedules are evaluated in UTC, or in ``WEBSITE_TIME_ZONE`` if that app setting names an IANA zone.
One function's runs never overlap: the next occurrence is computed after a run ends, so occurrences that
pass during a long run are skipped. A run that starts more than a second after its scheduled time is
``past_due``. A function that raises is logged and keeps its schedule. Each run goes to
``azure-functions-runtime`` as the host sends it: the TimerInfo document (``Schedule``,
``ScheduleStatus`` with ``Last``, ``Next`` and ``LastUpdated``, ``IsPastDue``) as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec, resolve_setting_expressions
from devhost.language_worker import InvocationFailed, LanguageWorker
from devhost.protos import function_rpc_pb2 as protos

log = logging.getLogger("devhost.timer")

PAST_DUE_TOLERANCE = timedelta(seconds=1)
LOCKS_SETTING = "DEVHOST_TIMER_LOCKS"
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{2})(?::(\d{2}))?$")


@dataclass(frozen=True)
class Schedule:
    """A resolved timer schedule: an NCRONTAB expression or a fixed interval."""

    expression: str
    cron: str | None
    interval: timedelta | None
    zone: tzinfo

    def next_after(self, moment: datetime) -> datetime:
        """The first occurrence strictly after ``moment`` (an aware datetime), as an aware UTC datetime."""
        if self.interval is not None:
            return moment.astimezone(UTC) + self.interval
        assert self.cron is not None
        return next(CronSim(self.cron, moment.astimezone(self.zone))).astimezone(UTC)


def _time_zone(environ: Mapping[str, str]) -> tzinfo:
    name = environ.get("WEBSITE_TIME_ZONE", "").strip()
    if not name or name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"WEBSITE_TIME_ZONE={name!r} is not an IANA time zone name") from exc


def parse_schedule(
    expression: str, environ: Mapping[str, str] | None = None, what: str = "schedule"
) -> Schedule:
    """Resolve ``%SETTING%`` in a timer schedule and validate it.

    Accepts six-field NCRONTAB (``"*/5 * * * * *"``: second minute hour day month day-of-week) or a
    TimeSpan interval (``"00:05:00"``). Raises ConfigurationError with the reason otherwise.
    """
    env = os.environ if environ is None else environ
    resolved = resolve_setting_expressions(expression, env, what).strip()
    zone = _time_zone(env)
    interval = _TIMESPAN.match(resolved)
    if interval:
        days, hours, minutes, seconds = (int(part or 0) for part in interval.groups())
        span = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if span <= timedelta(0):
            raise ConfigurationError(f"{what}: interval {resolved!r} must be positive")
        return Schedule(resolved, None, span, zone)
    fields = resolved.split()
    if len(fields) != 6:
        raise ConfigurationError(
            f"{what}: {resolved!r} has {len(fields)} fields; the Functions host needs six-field NCRONTAB "
            "('{second} {minute} {hour} {day} {month} {day-of-week}') or an hh:mm:ss interval"
        )
    try:
        next(CronSim(resolved, datetime.now(zone)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise ConfigurationError(f"{what}: {resolved!r} is not a valid NCRONTAB expression: {exc}") from exc
    return Schedule(resolved, resolved, None, zone)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


@dataclass
class _Timer:
    spec: FunctionSpec
    schedule: Schedule
    last: datetime | None = None


class SingletonLocks:
    """One exclusive lock file per timer function in a folder the stack's workers share: ``held`` takes the
    function's lock if it is free and keeps it (the kernel frees it when this process ends, however)."""

    def __init__(self, folder: str) -> None:
        self._folder = folder
        self._held: dict[str, int] = {}

    def held(self, name: str) -> bool:
        if name in self._held:
            return True
        fd = os.open(os.path.join(self._folder, f"{name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._held[name] = fd
        log.info("Functions.%s: this worker holds its timer", name)
        return True


class TimerHost:
    """Runs the app's timer-triggered functions on their schedules."""

    def __init__(
        self, specs: Sequence[FunctionSpec], worker: LanguageWorker, environ: Mapping[str, str]
    ) -> None:
        self._worker = worker
        folder = environ.get(LOCKS_SETTING, "")
        self._locks = SingletonLocks(folder) if folder else None
        self._timers = [
            _Timer(spec, parse_schedule(spec.schedule or "", environ, f"function {spec.name}: schedule"))
            for spec in specs
        ]
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start one scheduling task per timer function."""
        for timer in self._timers:
            self._tasks.append(asyncio.create_task(self._run(timer), name=f"timer-{timer.spec.name}"))

    def stop(self) -> None:
        """Fire nothing more; a run in progress finishes."""
        self._stopping.set()

    async def wait_stopped(self) -> None:
        """Wait until every timer task has ended (after :meth:`stop`, once in-flight runs finish)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _sleep_until(self, moment: datetime) -> bool:
        """Sleep until ``moment``; False if the host is stopping first."""
        delay = (moment - datetime.now(UTC)).total_seconds()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        return not self._stopping.is_set()

    async def _run(self, timer: _Timer) -> None:
        try:
            if timer.spec.run_on_startup and not self._stopping.is_set():
                now = datetime.now(UTC)
                await self._fire(timer, scheduled=now, next_at=timer.schedule.next_after(now))
            while not self._stopping.is_set():
                scheduled = timer.schedule.next_after(datetime.now(UTC))
                if not await self._sleep_until(scheduled):
                    break
                await self._fire(timer, scheduled=scheduled, next_at=timer.schedule.next_after(scheduled))
        except Exception:  # a bug here must not end the worker; the schedule is lost, so say so loudly
            log.critical(
                "timer for Functions.%s stopped by an internal error", timer.spec.name, exc_info=True
            )

    async def _fire(self, timer: _Timer, scheduled: datetime, next_at: datetime) -> None:
        if self._locks is not None and not self._locks.held(timer.spec.name):
            timer.last = scheduled
            return  # another worker of the stack runs this timer
        now = datetime.now(UTC)
        info = {
            "Schedule": {"AdjustForDST": True},
            "ScheduleStatus": {
                "Last": _iso(timer.last or scheduled),
                "Next": _iso(next_at),
                "LastUpdated": _iso(now),
            },
            "IsPastDue": now - scheduled > PAST_DUE_TOLERANCE,
        }
        timer.last = scheduled
        spec = timer.spec
        # The language worker logs a failure; the schedule continues, as the host's does.
        with contextlib.suppress(InvocationFailed):
            await self._worker.invoke(
                spec.function_id,
                [protos.ParameterBinding(name=spec.arg_name, data=protos.TypedData(json=json.dumps(info)))],
                reason=f"Timer fired at {_iso(now)}",
            )
