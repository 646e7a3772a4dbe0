"""Sending a saved decision's messages: per-queue order kept, different queues sent at the same time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from engine.decisions import Outgoing
from engine.outbox import deliver

pytestmark = pytest.mark.anyio


class _Body(BaseModel):
    n: int


def _message(queue: str, n: int) -> Outgoing:
    return Outgoing(queue=queue, body=_Body(n=n), message_id=f"{queue}-{n}", correlation_id="o-1")


class GatedSender:
    """Sends to ``held`` wait until a send to another queue has started; records start and end order."""

    def __init__(self, held: str, fail: str | None = None) -> None:
        self.held = held
        self.fail = fail
        self.other_started = asyncio.Event()
        self.events: list[str] = []

    async def send(self, queue: str, body: BaseModel, **options: Any) -> None:
        self.events.append(f"start {options['message_id']}")
        if queue == self.held:
            await asyncio.wait_for(self.other_started.wait(), timeout=5)
        else:
            self.other_started.set()
        if queue == self.fail:
            raise ConnectionError(f"{queue} is down")
        self.events.append(f"end {options['message_id']}")


async def test_a_request_does_not_wait_for_the_status_message_decided_with_it() -> None:
    sender = GatedSender(held="order-status")
    # Sequential sending would wait forever on the status message (the gate opens only once the
    # request's send has started): the wait_for above would raise.
    await deliver(sender, [_message("order-status", 1), _message("agent-alpha", 1)])
    assert sender.events.index("start agent-alpha-1") < sender.events.index("end order-status-1")


async def test_the_status_message_starts_after_the_work_decided_with_it() -> None:
    started: list[str] = []

    class Recording:
        async def send(self, queue: str, body: BaseModel, **options: Any) -> None:
            started.append(options["message_id"])
            await asyncio.sleep(0)

    # Decisions list the status first (it reports the move); the request carries the work on.
    await deliver(Recording(), [_message("order-status", 1), _message("agent-alpha", 1)])
    assert started == ["agent-alpha-1", "order-status-1"]


async def test_messages_to_one_queue_keep_their_order() -> None:
    sender = GatedSender(held="order-status")
    await deliver(
        sender, [_message("order-status", 1), _message("agent-alpha", 1), _message("order-status", 2)]
    )
    status = [e for e in sender.events if "order-status" in e]
    assert status == [
        "start order-status-1",
        "end order-status-1",
        "start order-status-2",
        "end order-status-2",
    ]


async def test_a_failed_send_is_raised_after_the_others_have_ended() -> None:
    sender = GatedSender(held="order-status", fail="agent-alpha")
    with pytest.raises(ConnectionError, match="agent-alpha is down"):
        await deliver(sender, [_message("order-status", 1), _message("agent-alpha", 1)])
    assert "end order-status-1" in sender.events
