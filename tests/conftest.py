"""Fixtures shared by every suite: Azurite's Table service, started once per test session."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.data.tables import TableServiceClient

from devhost import azurite
from servicebus_emulator.launcher import free_port
from tests.support import stop_process


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio, as the Functions worker does."""
    return "asyncio"


@pytest.fixture(scope="session")
def azurite_connection_string(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Azurite Table service on a free port, for the whole session."""
    data_dir: Path = tmp_path_factory.mktemp("azurite")
    port = free_port()
    with (data_dir / "azurite.log").open("wb") as log:
        process: subprocess.Popen[bytes] = azurite.launch(data_dir, port, in_memory=True, log=log)
    try:
        yield azurite.table_connection_string(port)
    finally:
        stop_process(process)


@pytest.fixture
def new_table(azurite_connection_string: str) -> Callable[[], str]:
    """Create a fresh, uniquely named table and return its name."""
    service = TableServiceClient.from_connection_string(azurite_connection_string)

    def create() -> str:
        name = "t" + uuid.uuid4().hex[:20]
        service.create_table(name)
        return name

    return create
