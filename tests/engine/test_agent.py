"""The Agent runtime: retries, circuit breaker, nontransient errors and the hard stop at complete-by."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from engine import queues
from engine.agent import Agent, PermanentError, TransientError
from engine.breaker import BreakerState, CircuitBreaker, MemoryBreakerStore
from engine.clock import ManualClock
from engine.errors import Accepted
from engine.messages import AgentReply, AgentRequest, ReplyOutcome
from engine.workflow import RetryPolicy
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

POLICY = RetryPolicy(
    max_tries=5,
    initial_backoff_seconds=0.5,
    max_backoff_seconds=2,
    call_timeout_seconds=3,
    breaker_fail_max=3,
    breaker_reset_seconds=30,
)


class Scripted:
    """An action that fails as scripted, then succeeds; records the timeouts it was given."""

    def __init__(self, clock: ManualClock, failures: list[Exception], call_seconds: float = 0.0) -> None:
        self.clock = clock
        self.failures = list(failures)
        self.call_seconds = call_seconds
        self.timeouts: list[float] = []
        self.keys: list[str] = []

    async def __call__(self, request: AgentRequest, timeout: float) -> dict[str, Any]:
        self.timeouts.append(timeout)
        self.keys.append(request.idempotency_key)
        self.clock.advance(self.call_seconds)
        if self.failures:
            raise self.failures.pop(0)
        return {"id": request.idempotency_key}


def sleeper(clock: ManualClock) -> Any:
    """An async sleep that only moves the manual clock."""

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    return sleep


def make(clock: ManualClock, action: Scripted) -> tuple[Agent, RecordingSender]:
    sender = RecordingSender()
    agent = Agent("alpha", {"do": action}, sender, clock, POLICY, sleep=sleeper(clock))
    return agent, sender


def request(clock: ManualClock, seconds: float = 10, attempt: int = 1) -> AgentRequest:
    return AgentRequest(
        order_id="o-1",
        step="first",
        step_index=0,
        attempt=attempt,
        action="do",
        idempotency_key="o-1:first",
        complete_by=clock.now() + timedelta(seconds=seconds),
    )


async def test_transient_faults_are_retried_with_the_same_key_then_succeed() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503"), TransientError("503")])
    agent, sender = make(clock, action)
    reply = await agent.handle(request(clock))
    assert reply is not None and reply.outcome is ReplyOutcome.SUCCEEDED
    assert action.keys == ["o-1:first"] * 3
    (sent,) = sender.sent
    assert sent.queue == queues.REPLY_QUEUE and isinstance(sent.body, AgentReply)
    assert sent.correlation_id == "o-1" and sent.body.result == {"id": "o-1:first"}


async def test_a_permanent_fault_is_reported_at_once() -> None:
    clock = ManualClock()
    action = Scripted(clock, [PermanentError("card declined")])
    agent, sender = make(clock, action)
    reply = await agent.handle(request(clock))
    assert reply is not None and reply.outcome is ReplyOutcome.FAILED and reply.error == "card declined"
    assert len(action.timeouts) == 1 and len(sender.sent) == 1


async def test_a_call_the_service_accepted_to_answer_later_is_reported_as_accepted_and_not_retried() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503"), Accepted()])
    agent, sender = make(clock, action)
    reply = await agent.handle(request(clock))
    assert reply is not None and reply.outcome is ReplyOutcome.ACCEPTED and reply.result == {}
    assert len(action.timeouts) == 2 and len(sender.sent) == 1
    assert agent.breaker._failures == 0, "an accepted call is a healthy answer: the 503 is forgotten"


async def test_per_call_timeout_never_exceeds_the_time_left() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("slow")], call_seconds=1.5)
    agent, _ = make(clock, action)
    await agent.handle(request(clock, seconds=2))
    assert action.timeouts[0] == 2
    assert all(t <= 2 for t in action.timeouts)


async def test_nothing_is_sent_when_complete_by_passes_during_retries() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503")] * 10, call_seconds=1)
    agent, sender = make(clock, action)
    assert await agent.handle(request(clock, seconds=3)) is None
    assert sender.sent == []
    assert clock.now() <= request(ManualClock()).complete_by  # never slept far past the deadline


async def test_nothing_is_sent_when_the_call_finishes_after_complete_by() -> None:
    clock = ManualClock()
    action = Scripted(clock, [], call_seconds=5)
    agent, sender = make(clock, action)
    assert await agent.handle(request(clock, seconds=4)) is None
    assert sender.sent == []


async def test_a_request_that_arrives_late_is_not_run() -> None:
    clock = ManualClock()
    action = Scripted(clock, [])
    agent, sender = make(clock, action)
    late = request(clock, seconds=1)
    clock.advance(2)
    assert await agent.handle(late) is None
    assert action.timeouts == [] and sender.sent == []


async def test_the_breaker_opens_after_repeated_failures_and_stops_calls() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503")] * 100)
    agent, sender = make(clock, action)
    assert await agent.handle(request(clock, seconds=60)) is None
    calls = len(action.timeouts)
    assert calls == POLICY.breaker_fail_max  # after that the breaker short-circuits the remaining tries
    assert agent.breaker.state is BreakerState.OPEN
    assert await agent.handle(request(clock, seconds=60, attempt=2)) is None
    assert len(action.timeouts) == calls  # still open: the service is left alone
    assert sender.sent == []


async def test_exhausted_tries_within_the_deadline_stay_silent() -> None:
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503")] * 4 + [TransientError("503")])
    policy_agent, sender = make(clock, action)
    policy_agent.breaker = CircuitBreaker(
        "alpha", MemoryBreakerStore(), clock, fail_max=100, reset_seconds=1, probe_seconds=3
    )
    assert await policy_agent.handle(request(clock, seconds=120)) is None
    assert len(action.timeouts) == POLICY.max_tries and sender.sent == []


async def test_unknown_action_is_a_failed_reply() -> None:
    clock = ManualClock()
    agent, _ = make(clock, Scripted(clock, []))
    reply = await agent.handle(request(clock).model_copy(update={"action": "nope"}))
    assert reply is not None and reply.outcome is ReplyOutcome.FAILED and "nope" in (reply.error or "")


async def test_calls_through_the_breaker_run_concurrently() -> None:
    """One slow call must not hold up the others (pybreaker's lock would serialise them)."""
    clock = ManualClock()
    release = asyncio.Event()
    started = asyncio.Event()

    async def action(request: AgentRequest, timeout: float) -> dict[str, Any]:
        if request.attempt == 1:
            started.set()
            await asyncio.wait_for(release.wait(), 5)
        return {"attempt": request.attempt}

    agent = Agent("alpha", {"do": action}, RecordingSender(), clock, POLICY)
    slow = asyncio.create_task(agent.handle(request(clock, seconds=60)))
    await asyncio.wait_for(started.wait(), 5)
    fast = await agent.handle(request(clock, seconds=60, attempt=2))
    release.set()
    assert (await asyncio.wait_for(slow, 5)) is not None
    assert fast is not None and fast.result == {"attempt": 2}


async def test_each_step_on_an_agent_retries_by_its_own_policy() -> None:
    from engine.workflow import StepDefinition, WorkflowDefinition

    workflow = WorkflowDefinition(
        name="two-on-one-agent",
        steps=(
            StepDefinition(name="first", agent="alpha", action="do", retry=RetryPolicy(max_tries=1)),
            StepDefinition(name="second", agent="alpha", action="do", retry=RetryPolicy(max_tries=3)),
        ),
    )
    clock = ManualClock()
    action = Scripted(clock, [TransientError("503")] * 3)
    sender = RecordingSender()
    agent = Agent.for_workflow(workflow, "alpha", {"do": action}, sender, clock, sleep=sleeper(clock))
    assert (
        await agent.handle(request(clock)) is None
    )  # one try, as the first step says: gave up, nothing sent
    second = request(clock).model_copy(update={"step": "second", "step_index": 1})
    reply = await agent.handle(second)  # three tries: two more failures, then success
    assert reply is not None and reply.outcome is ReplyOutcome.SUCCEEDED
    assert len(action.timeouts) == 4
    assert [s.message_id for s in sender.sent] == ["o-1:1:f:1:reply"]


async def test_no_retry_is_made_with_less_time_left_than_the_service_usually_takes() -> None:
    clock = ManualClock()
    action = Scripted(clock, [], call_seconds=2.5)
    agent, sender = make(clock, action)
    assert await agent.handle(request(clock, seconds=4)) is not None  # learns: about 2.5 s per call
    action.failures = [TransientError("503")] * 3
    action.call_seconds = 2
    # The first call fails with 2 s left: a retry would need 2.5 s, so none is made and nothing is sent.
    assert await agent.handle(request(clock, seconds=4, attempt=2)) is None
    assert len(action.timeouts) == 2 and len(sender.sent) == 1
    # With time to spare the same fault is retried as usual.
    action.failures = [TransientError("503")]
    assert await agent.handle(request(clock, seconds=30, attempt=3)) is not None
    assert len(action.timeouts) == 4


async def test_an_action_that_ignores_its_timeout_is_stopped_at_complete_by() -> None:
    from engine.clock import SystemClock

    clock = SystemClock()
    never = asyncio.Event()

    async def hangs(request: AgentRequest, timeout: float) -> dict[str, Any]:
        await never.wait()  # a client that does not honour the timeout it was given
        return {}

    sender = RecordingSender()
    agent = Agent("alpha", {"do": hangs}, sender, clock, POLICY)
    late = AgentRequest(
        order_id="o-1",
        step="first",
        step_index=0,
        attempt=1,
        action="do",
        idempotency_key="o-1:first",
        complete_by=clock.now() + timedelta(seconds=0.3),
    )
    assert await asyncio.wait_for(agent.handle(late), 10) is None
    assert sender.sent == [] and clock.now() >= late.complete_by


async def test_calls_given_less_time_than_the_service_takes_do_not_open_the_breaker() -> None:
    clock = ManualClock()
    action = Scripted(clock, [], call_seconds=2.5)
    agent, _ = make(clock, action)
    assert await agent.handle(request(clock, seconds=10)) is not None  # learns: about 2.5 s per call
    # Requests that waited for a slot and arrive with 1.5 s left: their calls time out, the service is fine.
    action.failures = [TransientError("timed out")] * POLICY.breaker_fail_max
    action.call_seconds = 1.5
    for attempt in range(2, 2 + POLICY.breaker_fail_max):
        assert await agent.handle(request(clock, seconds=1.5, attempt=attempt)) is None
    assert agent.breaker.state is BreakerState.CLOSED
    # The same failures with the full budget do count.
    action.failures = [TransientError("timed out")] * POLICY.breaker_fail_max
    assert await agent.handle(request(clock, seconds=60, attempt=9)) is None
    assert agent.breaker.state is BreakerState.OPEN
