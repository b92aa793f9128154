"""The receiver contract over azure-eventhub's public receive_batch loop (the fallback of the direct path)."""

from __future__ import annotations

import pytest

from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from rxhubs.transport._receiver import AzurePartitionReceiver
from tests.transport.envs import azure_env, azure_public_env, public_receive_path, quiet_sdk  # noqa: F401
from tests.transport.receiver_contract import HubEnv, ReceiverContract


@pytest.fixture
def env(azure_public_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return azure_public_env


class TestAzureReceiverPublicPath(ReceiverContract):
    pass


async def test_the_fallback_really_is_the_public_loop(env: HubEnv) -> None:
    await env.send([b"a", b"b"], "0")
    async with env.hub.receiver("0") as receiver:
        assert isinstance(receiver, AzurePartitionReceiver)
        bodies = [e.body for e in await receiver.receive_batch(10, max_wait=10)]
        if len(bodies) < 2:  # one read may hand over one event, the next the other
            bodies += [e.body for e in await receiver.receive_batch(10, max_wait=10)]
        assert bodies == [b"a", b"b"]
        assert receiver._direct_handler is None  # no link of ours: the SDK's receive_batch read these
        assert receiver._delivery_tags() is not None
