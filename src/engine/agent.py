"""The Agent runtime: wraps calls to one remote service with retries, a circuit breaker and a hard stop.

An Agent retries transient faults with exponential backoff and jitter, opens a circuit breaker on
repeated failure, reports a lasting (nontransient) fault as a failed reply, and never outlives the
request's complete-by: past it, it stops and sends nothing back, not even an error, because another
Agent instance may already be retrying the step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from . import calls, metrics, queues, telemetry, tracing
from .breaker import BreakerStore, CircuitBreaker, MemoryBreakerStore, Permit
from .clock import Clock
from .errors import Accepted, CircuitOpenError, DeadlineReached, PermanentError, TransientError
from .messages import AgentReply, AgentRequest, ReplyOutcome, reply_message_id
from .ports import MessageSender
from .workflow import RetryPolicy, WorkflowCatalog, WorkflowDefinition

__all__ = ["Action", "Agent", "DeadlineReached", "PermanentError", "TransientError"]

log = logging.getLogger("engine.agent")


# An action gets the request and the seconds it may spend on one call; it returns the result to record.
# It is a coroutine: a call that waits on a slow service holds no thread, so one process can have as
# many calls in flight as its host hands it messages.
Action = Callable[[AgentRequest, float], Awaitable[dict[str, Any]]]
Sleep = Callable[[float], Awaitable[None]]
# Weight of the newest successful call in the agent's running estimate of the service's latency.
_LATENCY_WEIGHT = 0.2


def _span_attributes(request: AgentRequest, service: str) -> dict[str, Any]:
    return {
        tracing.ORDER_ID: request.order_id,
        tracing.WORKFLOW: request.workflow,
        tracing.WORKFLOW_VERSION: request.workflow_version,
        tracing.STEP: request.step,
        tracing.STEP_INDEX: request.step_index,
        tracing.ATTEMPT: request.attempt,
        tracing.COMPENSATING: request.compensating,
        tracing.SERVICE: service,
        tracing.ACTION: request.action,
    }


def policy_key(workflow: str, version: int, step: str) -> str:
    """How an agent files a step's retry policy: by workflow, version and step."""
    return f"{workflow}@{version}:{step}"


class Agent:
    """Runs the actions of one remote service for the Scheduler.

    ``policy`` is the agent's retry policy and sets its circuit breaker; ``step_policies`` overrides the
    retries per step (by step name), so two steps on one agent can retry differently.

    A retry is made only if it can still succeed: after its backoff, the time left to complete-by must
    cover both the policy's ``min_call_seconds`` and the service's recent typical latency (a running
    average of its successful calls). A retry that would surely run out of time only adds load to a
    service that is already slow, and its answer could not be sent anyway. For the same reason a failed
    call that was given less time than that typical latency does not count against the circuit breaker.

    The circuit breaker is the service's record in ``breakers``, shared by every instance that uses the
    same store (see :mod:`engine.breaker`); without one it is this process's alone.
    """

    def __init__(
        self,
        name: str,
        actions: Mapping[str, Action],
        sender: MessageSender,
        clock: Clock,
        policy: RetryPolicy,
        sleep: Sleep | None = None,
        *,
        step_policies: Mapping[str, RetryPolicy] | None = None,
        breakers: BreakerStore | None = None,
        instance_id: str = "",
    ) -> None:
        self.name = name
        self.actions = dict(actions)
        self.sender = sender
        self.clock = clock
        self.policy = policy
        self.step_policies = dict(step_policies or {})
        self._sleep: Sleep = sleep or asyncio.sleep
        # One breaker per service, shared through the store: a service that keeps failing is left alone
        # for a while by every instance instead of being hammered by every retry of every order. A trial
        # call is a single call, so its holder needs it for at most the longest call timeout.
        self.breaker = CircuitBreaker(
            name,
            breakers or MemoryBreakerStore(),
            clock,
            fail_max=policy.breaker_fail_max,
            reset_seconds=policy.breaker_reset_seconds,
            probe_seconds=max(p.call_timeout_seconds for p in (policy, *self.step_policies.values())),
            instance_id=instance_id,
        )
        self.typical_latency = 0.0  # seconds; 0 until a call succeeded
        self.instance_id = instance_id

    @classmethod
    def for_workflow(
        cls,
        workflow: WorkflowDefinition,
        name: str,
        actions: Mapping[str, Action],
        sender: MessageSender,
        clock: Clock,
        sleep: Sleep | None = None,
        *,
        breakers: BreakerStore | None = None,
        instance_id: str = "",
    ) -> Agent:
        """The agent ``name`` of one workflow (see :meth:`for_catalog`)."""
        catalog = WorkflowCatalog(workflows=(workflow,))
        return cls.for_catalog(
            catalog, name, actions, sender, clock, sleep, breakers=breakers, instance_id=instance_id
        )

    @classmethod
    def for_catalog(
        cls,
        catalog: WorkflowCatalog,
        name: str,
        actions: Mapping[str, Action],
        sender: MessageSender,
        clock: Clock,
        sleep: Sleep | None = None,
        *,
        breakers: BreakerStore | None = None,
        instance_id: str = "",
    ) -> Agent:
        """The agent ``name``, with the retry policy of each step on it in every deployed workflow version.

        The catalog guarantees that the steps sharing an agent agree on its breaker. A request is run with
        its own step's policy (by workflow, version and step); one that names no workflow uses the policy
        of a step of that name, and an unknown step the agent's first step's policy.
        """
        policies = catalog.policies(name)
        if not policies:
            raise ValueError(f"no deployed workflow has a step on agent {name}")
        by_key: dict[str, RetryPolicy] = {}
        for (workflow, version, step), policy in policies.items():
            by_key[policy_key(workflow, version, step)] = policy
            by_key.setdefault(step, policy)
        default = next(iter(policies.values()))
        return cls(
            name,
            actions,
            sender,
            clock,
            default,
            sleep,
            step_policies=by_key,
            breakers=breakers,
            instance_id=instance_id,
        )

    def policy_for(self, step: str, workflow: str | None = None, version: int | None = None) -> RetryPolicy:
        """The retry policy of one step (of one workflow version, when known)."""
        if workflow is not None and version is not None:
            found = self.step_policies.get(policy_key(workflow, version, step))
            if found is not None:
                return found
        return self.step_policies.get(step, self.policy)

    def _seconds_left(self, deadline: datetime) -> float:
        return (deadline - self.clock.now()).total_seconds()

    async def handle(self, request: AgentRequest) -> AgentReply | None:
        """Run the request; send and return the reply, or None if complete-by passed (nothing sent)."""
        fields = telemetry.context(
            request.order_id, request.step, request.attempt, action=request.action, agent=self.name
        )
        if tracing.recording():
            tracing.annotate(**_span_attributes(request, self.name))
        action = self.actions.get(request.action)
        if action is None:
            reply = self._reply(
                request, ReplyOutcome.FAILED, error=f"agent {self.name} has no action {request.action!r}"
            )
            return await self._send(request, reply, fields)
        left_on_arrival = self._seconds_left(request.complete_by)
        if left_on_arrival <= 0:
            telemetry.info(log, "request arrived after complete-by; nothing sent", **fields)
            return None
        # How much of the step's budget queueing and dispatch left for the call: where a step's time went.
        fields["secondsLeftOnArrival"] = round(left_on_arrival, 3)
        note = calls.Note()
        started = self.clock.now()
        token = calls.current_note().set(note)
        try:
            result = await self._call_with_retries(action, request, note)
        except Accepted:
            # The service answers later, at the callback route: the Scheduler records that the step waits.
            reply = self._reply(request, ReplyOutcome.ACCEPTED)
        except PermanentError as exc:
            reply = self._reply(request, ReplyOutcome.FAILED, error=str(exc) or type(exc).__name__)
        except (TransientError, CircuitOpenError, DeadlineReached) as exc:
            telemetry.warning(log, "gave up within complete-by; nothing sent", **fields, error=str(exc))
            tracing.annotate(**{tracing.OUTCOME: "gave up"})
            tracing.error(str(exc) or type(exc).__name__)
            return None
        else:
            reply = self._reply(request, ReplyOutcome.SUCCEEDED, result=result)
        finally:
            calls.current_note().reset(token)
            if note.tries > 1:
                metrics.step_retried(request.workflow or "", request.step, "agent", note.tries - 1)
        reply.call = calls.AgentCall(
            instance=self.instance_id,
            started=started,
            ended=self.clock.now(),
            tries=note.tries,
            status=note.status,
            error=(note.error or "")[:1000] or None,
            body=note.body,
        )
        return await self._send(request, reply, fields)

    async def _failed(self, permit: Permit, counts: bool) -> None:
        if counts:
            await self.breaker.on_failure(permit)
        else:
            self.breaker.on_abandoned(permit)

    def _note_latency(self, seconds: float) -> None:
        if self.typical_latency == 0.0:
            self.typical_latency = seconds
        else:
            self.typical_latency += _LATENCY_WEIGHT * (seconds - self.typical_latency)

    async def _call_with_retries(
        self, action: Action, request: AgentRequest, note: calls.Note | None = None
    ) -> dict[str, Any]:
        deadline = request.complete_by
        policy = self.policy_for(request.step, request.workflow, request.workflow_version)

        def before_sleep_within_deadline(state: RetryCallState) -> None:
            # Never sleep past complete-by, nor retry with too little time left for the call to succeed.
            wait = state.next_action.sleep if state.next_action else 0.0
            left_after_wait = self._seconds_left(deadline) - wait
            needed = max(policy.min_call_seconds, self.typical_latency)
            if left_after_wait < needed:
                raise DeadlineReached(
                    f"{left_after_wait:.2f}s would be left for a retry that needs {needed:.2f}s "
                    f"(complete-by {deadline.isoformat()})"
                )
            telemetry.info(
                log,
                "retrying",
                **telemetry.context(request.order_id, request.step, request.attempt),
                tryNumber=state.attempt_number,
                waitSeconds=round(wait, 3),
                error=str(state.outcome.exception()) if state.outcome else "",
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_tries),
            wait=wait_exponential_jitter(
                multiplier=policy.initial_backoff_seconds,
                max=policy.max_backoff_seconds,
                jitter=policy.initial_backoff_seconds,
            ),
            retry=retry_if_exception_type((TransientError, CircuitOpenError)),
            before_sleep=before_sleep_within_deadline,
            reraise=True,
            sleep=self._sleep,
        )

        async def one_call() -> dict[str, Any]:
            left = self._seconds_left(deadline)
            if left <= 0:
                raise DeadlineReached(f"complete-by {deadline.isoformat()} passed")
            permit = await self.breaker.before_call()
            started = self.clock.now()
            if note is not None:
                note.tries += 1
                note.status = note.error = None
            # Per-call timeout: the policy's, but never beyond complete-by; the action applies it to its
            # own I/O, and this bound stops it at complete-by whatever the action does.
            given = min(policy.call_timeout_seconds, left)
            # A call given less time than the service usually takes says nothing about its health when it
            # fails: the budget was spent before the call (queueing), so it must not open the breaker.
            counts = given >= self.typical_latency
            hard_stop = asyncio.timeout(left)
            try:
                async with hard_stop:
                    result = await action(request, given)
            except PermanentError as exc:
                await self.breaker.on_neutral(permit)  # the service answered; it just said no
                if note is not None:
                    note.error = str(exc)
                raise
            except Accepted:
                await self.breaker.on_success(permit)  # the service answered: it took the call
                raise
            except TimeoutError as exc:
                await self._failed(permit, counts)
                if note is not None:
                    note.error = f"no answer within {given:.2f}s"
                if hard_stop.expired():
                    raise DeadlineReached(f"complete-by {deadline.isoformat()} passed during a call") from exc
                raise
            except Exception as exc:
                await self._failed(permit, counts)
                if note is not None:
                    note.error = str(exc) or type(exc).__name__
                raise
            except BaseException:
                self.breaker.on_abandoned(permit)  # cancelled (the worker stops): nothing learned
                raise
            await self.breaker.on_success(permit)
            self._note_latency((self.clock.now() - started).total_seconds())
            return result

        return await retrying(one_call)

    def _reply(
        self,
        request: AgentRequest,
        outcome: ReplyOutcome,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> AgentReply:
        return AgentReply(
            order_id=request.order_id,
            step_index=request.step_index,
            attempt=request.attempt,
            compensating=request.compensating,
            outcome=outcome,
            result=result or {},
            error=error,
            saved_task=request.saved_task,  # the Scheduler's, returned as it came
        )

    async def _send(
        self, request: AgentRequest, reply: AgentReply, fields: dict[str, Any]
    ) -> AgentReply | None:
        # The hard stop: a reply finished after complete-by is not sent.
        if self._seconds_left(request.complete_by) <= 0:
            telemetry.info(log, "finished after complete-by; nothing sent", **fields)
            return None
        tracing.annotate(**{tracing.OUTCOME: reply.outcome.value})
        if reply.outcome is ReplyOutcome.FAILED:
            tracing.error(reply.error or "failed")
        await self.sender.send(
            queues.REPLY_QUEUE,
            reply,
            message_id=reply_message_id(request),
            correlation_id=request.order_id,
        )
        telemetry.info(log, "replied", **fields, outcome=reply.outcome.value)
        return reply
