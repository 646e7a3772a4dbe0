"""How the worker settles messages: with a settled disposition, not waiting for the broker's outcome."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient

from devhost import servicebus_host
from tests.servicebus_emulator.conftest import RunningEmulator


@pytest.mark.anyio
async def test_receivers_settle_without_waiting_for_the_outcome(toy_emulator: RunningEmulator) -> None:
    # The SDK's peek-lock receiver waits for the broker's outcome of every settlement by default, through
    # a private flag the worker turns off (servicebus_host._receiver says why). If an upgrade of the SDK
    # renames the flag, setting it would change nothing: this fails first.
    client = ServiceBusClient.from_connection_string(toy_emulator.connection_string)
    async with client:
        plain = client.get_queue_receiver("hold", receive_mode=ServiceBusReceiveMode.PEEK_LOCK)
        assert getattr(plain, servicebus_host.AWAIT_SETTLEMENT_OUTCOME) is True
        listener = servicebus_host._Listener(
            spec=None,  # type: ignore[arg-type]  # _receiver reads only the entity and the connection
            entity="hold",
            topic=None,
            subscription=None,
            connection_string=toy_emulator.connection_string,
            max_concurrency=8,
        )
        host = object.__new__(servicebus_host.ServiceBusHost)
        host._clients = {toy_emulator.connection_string: client}
        worker_receiver = host._receiver(listener)
        assert getattr(worker_receiver, servicebus_host.AWAIT_SETTLEMENT_OUTCOME) is False
