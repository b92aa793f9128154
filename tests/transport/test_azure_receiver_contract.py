"""The receiver contract, kept by ``rxhubs.EventHub`` (azure-eventhub aio) against the local emulator."""

from __future__ import annotations

import pytest

from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from tests.transport.envs import azure_env, quiet_sdk  # noqa: F401  (fixtures)
from tests.transport.receiver_contract import HubEnv, ReceiverContract


@pytest.fixture
def env(azure_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return azure_env


class TestAzureReceiver(ReceiverContract):
    pass


async def test_the_direct_path_is_the_default(env: HubEnv) -> None:
    from rxhubs.transport._receiver import AzurePartitionReceiver

    await env.send([b"a", b"b"], "0")
    async with env.hub.receiver("0") as receiver:
        assert isinstance(receiver, AzurePartitionReceiver)
        batch = await receiver.receive_batch(10, max_wait=10)
        assert [e.body for e in batch] == [b"a", b"b"]
        assert receiver._direct_handler is not None  # read over our own loop on the SDK's link
