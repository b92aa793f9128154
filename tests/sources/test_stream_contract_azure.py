"""The partition-stream contract over rxhubs.EventHub (the unmodified azure-eventhub client) and the emulator."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest

from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.transport import EventHub
from tests.sources.stream_contract import PartitionStreamContract
from tests.transport.receiver_contract import HubEnv


@pytest.fixture(autouse=True)
def quiet_sdk() -> Iterator[None]:
    """The SDK logs each refused attach and lost link at WARNING; these tests cause them on purpose."""
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.fixture
async def env(emulator_factory: EmulatorFactory) -> AsyncIterator[HubEnv]:  # noqa: F811
    emulator = emulator_factory(hubs={"streams": 2})
    hub = EventHub.from_connection_string(emulator.connection_string("streams"))

    async def send(bodies: Sequence[bytes], partition_id: str) -> None:
        await hub.send(bodies, partition_id=partition_id)

    async with hub:
        yield HubEnv(hub, send)


class TestAzureStreams(PartitionStreamContract):
    pass
