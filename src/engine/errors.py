"""Every error the engine raises, in one family.

The root is :class:`EngineError`; each subclass carries what a caller needs as attributes, so the HTTP
layer (and a host) can map a whole family to a status code in one place and still say precisely what
went wrong.
"""

from __future__ import annotations

from collections.abc import Iterable


class EngineError(Exception):
    """The root of every error the engine raises on purpose."""


# ---- what the application asked for ------------------------------------------------------------------
class NotFound(EngineError):
    """No task with that id."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id
        super().__init__(f"no order {order_id!r}")


class InvalidState(EngineError):
    """The task is in a state that does not allow the request.

    ``state`` is the state the task was found in, ``allowed`` the states the request needs.
    """

    def __init__(self, order_id: str, state: str, allowed: Iterable[str], reason: str | None = None) -> None:
        self.order_id = order_id
        self.state = state
        self.allowed = tuple(allowed)
        self.reason = reason
        super().__init__(
            reason or f"order {order_id} is {state}; this needs {' or '.join(self.allowed)}",
        )


class InvalidUpdate(EngineError):
    """An update of an order's input that its workflow does not let change, or whose values its input model
    refuses: nothing was changed."""

    def __init__(self, order_id: str, reason: str) -> None:
        self.order_id = order_id
        super().__init__(f"order {order_id}: {reason}")


class UnknownStep(EngineError):
    """The task's workflow has no step with that name."""

    def __init__(self, order_id: str, step: str, steps: Iterable[str]) -> None:
        self.order_id = order_id
        self.step = step
        self.steps = tuple(steps)
        super().__init__(f"order {order_id} has no step {step!r}; its steps are {', '.join(self.steps)}")


class UnknownWorkflow(EngineError):
    """A submission named a workflow this deployment does not have."""

    def __init__(self, workflow: str, workflows: Iterable[str]) -> None:
        self.workflow = workflow
        self.workflows = tuple(workflows)
        super().__init__(f"no workflow {workflow!r}; the workflows are {', '.join(self.workflows)}")


class NotServedYet(EngineError):
    """A submission named a workflow that a deployment under way adds, which not every instance serves yet
    (``engine.formats.Formats.served_by_all``): an instance without it would put the order in Error."""

    def __init__(self, workflow: str) -> None:
        self.workflow = workflow
        super().__init__(
            f"workflow {workflow!r} is not served by every instance yet (a deployment is under way): "
            "submit it again in a minute"
        )


class PreconditionFailed(EngineError):
    """The caller acted on a version of the task that is no longer current: nothing was changed."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id
        super().__init__(f"order {order_id} changed since that version was read; read it again")


class Conflict(EngineError):
    """A task with that id exists with other input."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id
        super().__init__(f"order {order_id} exists with a different body")


class InvalidContinuation(EngineError, ValueError):
    """A listing's continuation token was not one the store issued."""

    def __init__(self, token: str) -> None:
        self.token = token
        super().__init__("invalid continuation token")


# ---- the state store ----------------------------------------------------------------------------------
class ConcurrencyError(EngineError):
    """Someone else changed the record first (ETag mismatch): back off without side effects."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id
        super().__init__(f"order {order_id} changed since it was loaded")


class BreakerConflict(EngineError):
    """A circuit breaker's record changed since it was read (ETag mismatch): read it and decide again."""

    def __init__(self, service: str) -> None:
        self.service = service
        super().__init__(f"the breaker of {service} changed since it was read")


# ---- messages -----------------------------------------------------------------------------------------
class PoisonMessage(EngineError):
    """A message that can never be processed. Raising it makes the host abandon the message; the
    queue dead-letters it once its max delivery count is reached, so it is never retried forever."""

    def __init__(self, queue: str, message_id: str | None, model: str, reason: str) -> None:
        self.queue = queue
        self.message_id = message_id
        self.model = model
        self.reason = reason
        super().__init__(f"{queue}: message {message_id} is not a {model}: {reason}")


class NotUnderstood(EngineError):
    """A message or stored record this release cannot read: written by a later release (a later format,
    a kind or outcome it does not know) or corrupted. Passed over and reported, never failed on
    (:mod:`engine.formats`). ``order_id`` names the order where known."""

    def __init__(self, what: str, order_id: str | None = None) -> None:
        self.what = what
        self.order_id = order_id
        super().__init__(f"order {order_id}: {what}" if order_id else what)


# ---- calls to remote services (raised by actions and the Agent runtime) --------------------------------
class CallError(EngineError):
    """A call to a remote service did not produce a result."""


class TransientError(CallError):
    """A fault worth retrying: timeouts, 5xx, connection errors."""


class PermanentError(CallError):
    """A lasting fault: retrying cannot help (the service rejected the request)."""


class CircuitOpenError(CallError):
    """The breaker is open: the call was not made."""


class Accepted(Exception):  # an outcome, not an error: the service took the call
    """The service accepted the call (202) and will send the outcome to the callback route later."""


class DeadlineReached(CallError):
    """Complete-by passed: the Agent stops silently."""
