"""The partition-stream contract over the in-memory hub, on asyncio."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rxhubs.testing import InMemoryEventHub
from tests.sources.stream_contract import PartitionStreamContract
from tests.transport.receiver_contract import HubEnv


@pytest.fixture
def env() -> HubEnv:
    hub = InMemoryEventHub(partition_count=2)

    async def send(bodies: Sequence[bytes], partition_id: str) -> None:
        hub.send(list(bodies), partition_id=partition_id)

    return HubEnv(hub, send)


class TestInMemoryStreams(PartitionStreamContract):
    pass
