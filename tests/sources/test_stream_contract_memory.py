"""The partition-stream contract over the in-memory hub, on asyncio."""

from __future__ import annotations

import pytest

from tests.sources.stream_contract import PartitionStreamContract
from tests.transport.envs import memory_env  # noqa: F401  (fixture)
from tests.transport.receiver_contract import HubEnv


@pytest.fixture
def env(memory_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return memory_env


class TestInMemoryStreams(PartitionStreamContract):
    pass
