"""The partition-stream contract over rxhubs.EventHub (the unmodified azure-eventhub client) and the emulator."""

from __future__ import annotations

import pytest

from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from tests.sources.stream_contract import PartitionStreamContract
from tests.transport.envs import azure_env, quiet_sdk  # noqa: F401  (fixtures)
from tests.transport.receiver_contract import HubEnv


@pytest.fixture
def env(azure_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return azure_env


class TestAzureStreams(PartitionStreamContract):
    pass
