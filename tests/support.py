"""Helpers shared by the test suites: free ports, polling, and processes stopped by their PID."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from servicebus_emulator.launcher import free_port, stop

__all__ = ["free_port", "stop_process", "wait_for"]


def wait_for[T](
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll ``condition`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """Stop a process a test started, by its PID: SIGTERM, then SIGKILL if it does not exit."""
    return stop(process, timeout=timeout)


# The key that seals sensitive input fields, which the app requires while a workflow declares one.
INPUT_KEY = {"INPUT_ENCRYPTION_KEY": "test:" + "A" * 43 + "="}


def service_urls(url: str) -> dict[str, str]:
    """Every declared service's URL setting, all pointing at ``url``."""
    from orders.settings import SERVICE_URL_SETTINGS

    return dict.fromkeys(SERVICE_URL_SETTINGS.values(), url)
