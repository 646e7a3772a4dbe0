"""The Python language worker's code in this process: ``azure-functions-runtime``, driven as Azure drives it.

On Python 3.13 and later, Azure runs a small proxy worker that hands every request from the Functions
host to the ``azure-functions-runtime`` library. This module is the devhost's side of that hand-over: it
sends the runtime the host's messages (generated from ``devhost/protos/function_rpc.proto``) and the
proxy worker's request wrapper, in the same order: start the runtime's thread pool, ``WorkerInitRequest``
(the runtime imports ``function_app.py`` and indexes it), ``FunctionsMetadataRequest``, one
``FunctionLoadRequest`` per function, then an ``InvocationRequest`` per trigger. The runtime builds the
``azure.functions`` objects, calls the function (synchronous ones in its pool of
``PYTHON_THREADPOOL_THREAD_COUNT`` threads, asynchronous ones on this process's event loop) and returns
the result or the exception as an ``InvocationResponse``.

What stays the host's: counting and logging executions ("Executed 'Functions.x' (Succeeded|Failed, ...)"),
which the Functions host writes from the same responses.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure_functions_runtime as runtime

from devhost.errors import ConfigurationError
from devhost.protos import function_rpc_pb2 as protos

log = logging.getLogger("devhost.functions")

SCRIPT_FILE = "function_app.py"
MODULE_NAME = "function_app"
# What this host says about itself in WorkerInitRequest (Functions 4.x; the runtime does not read it).
HOST_VERSION = "4.0.0-devhost"
HOST_CAPABILITIES: Mapping[str, str] = {}
SUCCESS = protos.StatusResult.Success


@dataclass
class WorkerRequest:
    """The proxy worker's wrapper around a host message, the shape the runtime's handlers take."""

    name: str
    request: protos.StreamingMessage
    properties: dict[str, Any] | None = None


class AppLoadError(Exception):
    """The runtime could not import, index or load the app; the message is its report (with traceback)."""


class InvocationFailed(Exception):
    """A function raised: the runtime's report of it (``Type: message`` and the formatted traceback)."""

    def __init__(self, function_name: str, message: str, stack_trace: str) -> None:
        super().__init__(f"Exception while executing function: Functions.{function_name}. {message}")
        self.function_name = function_name
        self.message = message
        self.stack_trace = stack_trace


def _failure(result: protos.StatusResult, what: str) -> str:
    exception = result.exception
    detail = exception.message or "no message"
    if exception.stack_trace:
        detail = f"{detail}\n{exception.stack_trace.rstrip()}"
    return f"{what} failed: {detail}"


def _forget_imported_app() -> None:
    """Drop an imported ``function_app`` module, so the runtime imports (and indexes) a new app object:
    ``FunctionApp.get_functions()`` may run only once per object."""
    sys.modules.pop(MODULE_NAME, None)


def raw_bindings(metadata: protos.RpcFunctionMetadata) -> list[dict[str, Any]]:
    """The function's bindings as function.json would list them (the runtime's raw_bindings)."""
    return [json.loads(binding) for binding in metadata.raw_bindings]


class LanguageWorker:
    """One app's functions, indexed and invoked by ``azure-functions-runtime`` in this process.

    The runtime keeps its state in module globals (one app per process, as in a worker process): use one
    LanguageWorker per process, or index another app only after the first is done with.
    """

    def __init__(self, app_dir: Path, host: str = "127.0.0.1") -> None:
        self.app_dir = app_dir.resolve()
        self._host = host
        self.functions: dict[str, protos.RpcFunctionMetadata] = {}  # by function id
        self.executions: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.seconds: dict[str, float] = {}  # wall time per function, for GB-s estimates
        self._running = 0

    @property
    def running(self) -> int:
        """How many invocations have started and not finished."""
        return self._running

    @property
    def thread_count(self) -> int | None:
        """Threads of the runtime's pool for synchronous functions (None before :meth:`start`)."""
        executor = runtime.get_threadpool_executor()
        return None if executor is None else int(executor._max_workers)

    def _request(self, **content: Any) -> WorkerRequest:
        message = protos.StreamingMessage(request_id=str(uuid.uuid4()), **content)
        name = next(iter(content))
        return WorkerRequest(name, message, {"protos": protos, "host": self._host})

    async def start(self) -> list[protos.RpcFunctionMetadata]:
        """Start the runtime, let it import and index the app, load every function; return their metadata.

        Raises ConfigurationError if there is no ``function_app.py``, and :class:`AppLoadError` with the
        runtime's report when importing, indexing or loading the app fails.
        """
        if not (self.app_dir / SCRIPT_FILE).is_file():
            raise ConfigurationError(
                f"{self.app_dir / SCRIPT_FILE} does not exist: --app-dir must hold the app's {SCRIPT_FILE}"
            )
        # The worker imports the app as the module function_app, from the app's directory.
        if str(self.app_dir) in sys.path:
            sys.path.remove(str(self.app_dir))
        sys.path.insert(0, str(self.app_dir))
        _forget_imported_app()
        importlib.invalidate_caches()
        runtime.start_threadpool_executor()
        directory = str(self.app_dir)
        init = await runtime.worker_init_request(
            self._request(
                worker_init_request=protos.WorkerInitRequest(
                    host_version=HOST_VERSION,
                    capabilities=HOST_CAPABILITIES,
                    worker_directory=directory,
                    function_app_directory=directory,
                )
            )
        )
        if init.result.status != SUCCESS:
            raise AppLoadError(_failure(init.result, f"indexing {self.app_dir / SCRIPT_FILE}"))
        metadata = await runtime.functions_metadata_request(
            self._request(
                functions_metadata_request=protos.FunctionsMetadataRequest(function_app_directory=directory)
            )
        )
        if metadata.result.status != SUCCESS:
            raise AppLoadError(_failure(metadata.result, "reading the functions' metadata"))
        loaded: list[protos.RpcFunctionMetadata] = []
        for function in metadata.function_metadata_results:
            response = await runtime.function_load_request(
                self._request(
                    function_load_request=protos.FunctionLoadRequest(
                        function_id=function.function_id, metadata=function
                    )
                )
            )
            if response.result.status != SUCCESS:
                raise AppLoadError(_failure(response.result, f"loading Functions.{function.name}"))
            self.functions[function.function_id] = function
            loaded.append(function)
        return loaded

    def stop(self) -> None:
        """Let go of the runtime's thread pool without waiting for calls still in it."""
        executor = runtime.get_threadpool_executor()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    async def invoke(
        self,
        function_id: str,
        input_data: Iterable[protos.ParameterBinding],
        trigger_metadata: Mapping[str, protos.TypedData] | None = None,
        reason: str = "",
    ) -> protos.InvocationResponse:
        """Send one InvocationRequest; return the runtime's response if the function succeeded.

        Raises :class:`InvocationFailed` with the runtime's report if it failed (logged at ERROR here, as
        the host logs it); the caller settles the trigger (500, abandon, next schedule).
        """
        name = self.functions[function_id].name
        invocation_id = str(uuid.uuid4())
        request = self._request(
            invocation_request=protos.InvocationRequest(
                invocation_id=invocation_id,
                function_id=function_id,
                input_data=input_data,
                trigger_metadata=trigger_metadata,
                trace_context=protos.RpcTraceContext(),
                retry_context=protos.RetryContext(),
            )
        )
        started = time.monotonic()
        self._running += 1
        self.executions[name] = self.executions.get(name, 0) + 1
        try:
            response: protos.InvocationResponse = await runtime.invocation_request(request)
        finally:
            self._running -= 1
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started
        duration = (time.monotonic() - started) * 1000
        if response.result.status == SUCCESS:
            log.debug(
                "Executed 'Functions.%s' (Succeeded, Id=%s, Duration=%dms, Reason=%s)",
                name,
                invocation_id,
                duration,
                reason,
            )
            return response
        self.failures[name] = self.failures.get(name, 0) + 1
        exception = response.result.exception
        log.error(
            "Executed 'Functions.%s' (Failed, Id=%s, Duration=%dms, Reason=%s)\n%s\n%s",
            name,
            invocation_id,
            duration,
            reason,
            exception.message,
            exception.stack_trace.rstrip(),
        )
        raise InvocationFailed(name, exception.message, exception.stack_trace)
