"""The real emulator process with faults planted in it, to show that a fault never leaves a client waiting.

Run as ``python -m tests.servicebus_emulator.faulty_emulator <servicebus-emulator arguments>``. It is the
unchanged command line, with two of the broker's steps made to raise for marked requests:

- a message whose ``message_id`` is :data:`FAIL_ON_SEND` raises inside the queue's ``send``;
- a peek from sequence number :data:`FAIL_ON_PEEK_FROM` raises inside the management operation;
- settling a message whose ``message_id`` is :data:`FAIL_ON_SETTLE` raises inside the queue's ``settle``.
"""

from __future__ import annotations

import sys
from typing import Any

from servicebus_emulator import cli
from servicebus_emulator.entity import Subqueue
from servicebus_emulator.management import ManagementNode

FAIL_ON_SEND = "emulator-fault-on-send"
FAIL_ON_PEEK_FROM = 4242
FAIL_ON_SETTLE = "emulator-fault-on-settle"


class PlantedFault(RuntimeError):
    """The failure this wrapper plants."""


def _plant() -> None:
    send = Subqueue.send
    peek = ManagementNode._op_peek_message
    settle = Subqueue.settle

    def failing_send(self: Subqueue, sections: Any, now: float, scheduled_time: float | None = None) -> Any:
        if sections.message_id == FAIL_ON_SEND:
            raise PlantedFault("planted fault in send")
        return send(self, sections, now, scheduled_time)

    def failing_peek(self: ManagementNode, body: dict[str, Any], now: float) -> Any:
        if int(body.get("from-sequence-number", 0)) == FAIL_ON_PEEK_FROM:
            raise PlantedFault("planted fault in peek")
        return peek(self, body, now)

    def failing_settle(self: Subqueue, token: Any, *args: Any, **kwargs: Any) -> Any:
        held = self.locks.get(token)
        if held is not None and held.sections.message_id == FAIL_ON_SETTLE:
            raise PlantedFault("planted fault in settle")
        return settle(self, token, *args, **kwargs)

    Subqueue.send = failing_send  # type: ignore[method-assign]
    Subqueue.settle = failing_settle  # type: ignore[method-assign]
    ManagementNode._op_peek_message = failing_peek  # type: ignore[method-assign]


if __name__ == "__main__":
    _plant()
    sys.exit(cli.main(sys.argv[1:]))
