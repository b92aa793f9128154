"""The receiver contract, kept by the in-memory hub."""

from __future__ import annotations

import pytest

from tests.transport.envs import memory_env  # noqa: F401  (fixture)
from tests.transport.receiver_contract import HubEnv, ReceiverContract


@pytest.fixture
def env(memory_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return memory_env


class TestInMemoryReceiver(ReceiverContract):
    pass
