"""The partition-stream contract over azure-eventhub's public receive_batch loop (the direct path's fallback)."""

from __future__ import annotations

import pytest

from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from tests.sources.stream_contract import PartitionStreamContract
from tests.transport.envs import azure_env, azure_public_env, public_receive_path, quiet_sdk  # noqa: F401
from tests.transport.receiver_contract import HubEnv


@pytest.fixture
def env(azure_public_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return azure_public_env


class TestAzureStreamsPublicPath(PartitionStreamContract):
    pass
