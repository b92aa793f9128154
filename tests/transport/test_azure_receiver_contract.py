"""The receiver contract, kept by ``rxhubs.EventHub`` (azure-eventhub aio) against the local emulator."""

from __future__ import annotations

import pytest

from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from tests.transport.envs import azure_env, quiet_sdk, receive_path  # noqa: F401  (fixtures)
from tests.transport.receiver_contract import HubEnv, ReceiverContract


@pytest.fixture
def env(receive_path: str, azure_env: HubEnv) -> HubEnv:  # noqa: F811 - the shared fixture, under the contract's name
    return azure_env


class TestAzureReceiver(ReceiverContract):
    pass


async def test_the_direct_path_is_the_default(env: HubEnv, receive_path: str) -> None:  # noqa: F811
    from rxhubs.transport._receiver import AzurePartitionReceiver

    await env.send([b"a", b"b"], "0")
    async with env.hub.receiver("0") as receiver:
        assert isinstance(receiver, AzurePartitionReceiver)
        bodies = [e.body for e in await receiver.receive_batch(10, max_wait=10)]
        if len(bodies) < 2:  # one read may hand over one event, the next the other
            bodies += [e.body for e in await receiver.receive_batch(10, max_wait=10)]
        assert bodies == [b"a", b"b"]
        assert receiver._direct_handler is not None  # read over our own loop on the SDK's link
        native = receiver._native_link
        if receive_path == "native":  # read by the compiled frame reader, not pyamqp's
            assert native is not None and native.messages == 2
        else:
            assert native is None


async def test_a_trickle_is_handed_out_while_the_link_keeps_reading(env: HubEnv) -> None:
    """The SDK reads up to `prefetch` frames per read while frames keep coming: a steady trickle (here from
    another process's worth of client: a sync producer on a thread) must not wait for the read to end (it
    would for 1000 x 50 ms); each pull gets what arrived."""
    import threading
    import time

    from azure.eventhub import EventData, EventHubProducerClient

    connection_string = env.hub._conn.to_connection_string()  # type: ignore[attr-defined]
    stop = threading.Event()

    def trickle() -> None:
        with EventHubProducerClient.from_connection_string(connection_string) as producer:
            for i in range(200):
                if stop.is_set():
                    return
                batch = producer.create_batch(partition_id="1")
                batch.add(EventData(b"%d" % i))
                producer.send_batch(batch)
                time.sleep(0.05)

    async with env.hub.receiver("1", prefetch=1000) as receiver:
        assert await receiver.receive_batch(10, max_wait=0.5) == []  # attached to the empty partition
        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        got: list[bytes] = []
        try:
            for _ in range(40):
                got += [e.body for e in await receiver.receive_batch(100, max_wait=5.0)]
                if len(got) >= 20:
                    break
            # handed out while the trickle goes on (200 sends), not once the socket falls quiet after it
            assert sender.is_alive() and not stop.is_set()
        finally:
            stop.set()
            sender.join(timeout=10)
        assert got[:20] == [b"%d" % i for i in range(20)]
