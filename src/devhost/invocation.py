"""Calling a user function as the Python worker does: sync functions in a thread pool, async ones awaited.

Every invocation gets an id and is logged once: at DEBUG when it succeeds, at ERROR with the traceback
when it raises. The invoker counts executions per function (a dictionary increment), which the worker
writes to its stats file for capacity estimates.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.functions import _abc as func_abc

from devhost.bindings import CONTEXT_PARAMETER, FunctionSpec

log = logging.getLogger("devhost.invocation")


class _TraceContext(func_abc.TraceContext):
    """No distributed trace is propagated locally: empty values, as for an invocation without one."""

    @property
    def trace_state(self) -> str:
        return ""

    @property
    def trace_parent(self) -> str:
        return ""

    @property
    def attributes(self) -> dict[str, str]:
        return {}


class _RpcException(func_abc.RpcException):
    """No previous attempt failed: empty values."""

    @property
    def source(self) -> str:
        return ""

    @property
    def stack_trace(self) -> str:
        return ""

    @property
    def message(self) -> str:
        return ""


class _RetryContext(func_abc.RetryContext):
    """The worker applies no retry policy: every invocation is attempt 0 of 0."""

    @property
    def retry_count(self) -> int:
        return 0

    @property
    def max_retry_count(self) -> int:
        return 0

    @property
    def exception(self) -> func_abc.RpcException:
        return _RpcException()


class InvocationContext(func.Context):
    """The ``context`` argument a function gets when its signature asks for one."""

    def __init__(self, invocation_id: str, function_name: str, function_directory: str) -> None:
        self._invocation_id = invocation_id
        self._function_name = function_name
        self._function_directory = function_directory
        self._thread_local_storage = threading.local()
        self._thread_local_storage.invocation_id = invocation_id

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> Any:
        return self._thread_local_storage

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._function_directory

    @property
    def trace_context(self) -> func_abc.TraceContext:
        return _TraceContext()

    @property
    def retry_context(self) -> func_abc.RetryContext:
        return _RetryContext()


class Invoker:
    """Runs user functions for all the trigger hosts of one worker."""

    def __init__(self, executor: ThreadPoolExecutor, app_dir: Path) -> None:
        self._executor = executor
        self._app_dir = str(app_dir)
        self._running = 0
        self.executions: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.seconds: dict[str, float] = {}  # wall time per function, for GB-s estimates

    @property
    def running(self) -> int:
        """How many invocations have started and not finished."""
        return self._running

    async def invoke(self, spec: FunctionSpec, trigger_value: Any, reason: str) -> Any:
        """Call ``spec``'s function with ``trigger_value`` bound to its trigger argument.

        Returns what the function returns; an exception it raises is logged (ERROR, with traceback) and
        re-raised for the caller to settle the trigger (500, abandon, next schedule).
        """
        invocation_id = str(uuid.uuid4())
        kwargs: dict[str, Any] = {spec.arg_name: trigger_value}
        if spec.pass_context:
            kwargs[CONTEXT_PARAMETER] = InvocationContext(invocation_id, spec.name, self._app_dir)
        started = time.monotonic()
        self._running += 1
        self.executions[spec.name] = self.executions.get(spec.name, 0) + 1
        try:
            if spec.is_async:
                result = await spec.func(**kwargs)
            else:
                # Copy the context so the caller's contextvars reach the thread, as asyncio.to_thread does.
                call = functools.partial(
                    contextvars.copy_context().run, functools.partial(spec.func, **kwargs)
                )
                result = await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except Exception:
            self.failures[spec.name] = self.failures.get(spec.name, 0) + 1
            log.error(
                "Executed 'Functions.%s' (Failed, Id=%s, Duration=%dms, Reason=%s)",
                spec.name,
                invocation_id,
                (time.monotonic() - started) * 1000,
                reason,
                exc_info=True,
            )
            raise
        finally:
            self._running -= 1
            self.seconds[spec.name] = self.seconds.get(spec.name, 0.0) + time.monotonic() - started
        log.debug(
            "Executed 'Functions.%s' (Succeeded, Id=%s, Duration=%dms, Reason=%s)",
            spec.name,
            invocation_id,
            (time.monotonic() - started) * 1000,
            reason,
        )
        return result
