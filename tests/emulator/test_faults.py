"""Fault control (``emulator.faults``): each fault is felt by the unmodified azure-eventhub client.

What the service does in each case, and the sources, are in docs/emulator.md ("Fault control"): server busy
is ``com.microsoft:server-busy`` (the SDK's ``CUSTOM_CONDITION_BACKOFF`` waits 4 s before retrying it), a
steal is ``amqp:link:stolen`` (the SDK gives up at once), a forced close ``amqp:connection:forced``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.aio import EventHubProducerClient as AioProducer
from azure.eventhub.exceptions import ConnectError

import rxhubs
from rxhubs.emulator import BackgroundEmulator, Emulator, LinkRecord
from rxhubs.errors import ConfigurationError, EmulatorError, OwnershipLostError

from ._sdk import SyncReceiver

pytestmark = pytest.mark.timeout(90)

BUSY = "com.microsoft:server-busy"


def _records(emulator: BackgroundEmulator, event: str, condition: str | None = None) -> list[LinkRecord]:
    return [r for r in emulator.link_log if r.event == event and (condition is None or r.condition == condition)]


def _wait(condition: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def test_server_busy_at_attach_refuses_producers_and_consumers_until_cleared(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 2})
    conn = emulator.connection_string("h")
    emulator.faults.server_busy(60, on=["attach"])
    assert emulator.faults.active[0].startswith("server-busy on attach for every hub")
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        with pytest.raises(ConnectError) as refused:
            producer.send_event(EventData("refused"), partition_id="0")
        assert BUSY in str(refused.value) and "throttled" in str(refused.value)
    with SyncReceiver(conn, "0", starting_position="-1") as receiver:
        error = receiver.wait_error(20)
    assert error is not None and BUSY in str(error), error
    refusal = _records(emulator, "refuse", BUSY)
    assert refusal and refusal[0].hub == "h" and refusal[0].partition_id == "0"
    assert not _records(emulator, "attach")  # never attached while busy
    emulator.faults.clear()
    assert emulator.faults.active == []
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        producer.send_event(EventData("accepted"), partition_id="0")
        assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] == 0


async def test_management_is_answered_503_server_busy_for_the_hub_named_only() -> None:
    """On the emulator's own loop (``async with Emulator``): the fault methods are plain calls there too."""
    async with Emulator(hubs={"busy": 1, "calm": 1}) as emulator:
        emulator.faults.server_busy(60, on="management", hub="BUSY")  # hub names ignore case, as in the service
        async with AioProducer.from_connection_string(emulator.connection_string("busy"), retry_total=0) as producer:
            with pytest.raises(ConnectError) as refused:
                await producer.get_partition_ids()
        assert "Status code: 503" in str(refused.value) and BUSY in str(refused.value)
        async with AioProducer.from_connection_string(emulator.connection_string("calm"), retry_total=0) as producer:
            assert await producer.get_partition_ids() == ["0"]
            await producer.send_event(EventData("sends still work"))  # only management was refused
        [active] = emulator.faults.active
        assert active.startswith("server-busy on management for hub 'busy'")
        with pytest.raises(ConfigurationError, match="unknown event hub"):
            emulator.faults.server_busy(1, hub="nohub")
        with pytest.raises(ConfigurationError, match="attach, flow, management"):
            emulator.faults.server_busy(1, on=["send"])
        with pytest.raises(ConfigurationError, match="seconds"):
            emulator.faults.server_busy(0)


def test_server_busy_on_flow_detaches_receivers_and_holds_deliveries_until_it_ends(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 1})
    conn = emulator.connection_string("h")
    received: list[float] = []
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default", retry_total=5)
    thread = threading.Thread(target=client.receive, daemon=True, kwargs={
        "on_event": lambda _ctx, _event: received.append(time.monotonic()), "partition_id": "0",
        "starting_position": "-1", "owner_level": 7})
    thread.start()
    try:
        assert _wait(lambda: _records(emulator, "attach"))
        emulator.faults.server_busy(60, on="flow")
        detached = _records(emulator, "detach", BUSY)
        assert len(detached) == 1 and detached[0].owner_level == 7
        with EventHubProducerClient.from_connection_string(conn) as producer:
            producer.send_event(EventData("held"), partition_id="0")
        assert _wait(lambda: len(_records(emulator, "attach")) == 2)  # the SDK re-attached (it retries busy)
        time.sleep(1.0)
        assert received == []  # the credit the new link granted is not served while busy
        emulator.faults.clear()
        assert _wait(lambda: len(received) == 1)
    finally:
        client.close()
        thread.join(15)


async def test_steal_cuts_an_rxhubs_receiver_off_with_ownership_lost(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 2})
    conn = emulator.connection_string("h")
    await asyncio.to_thread(_send, conn, "1")
    hub = rxhubs.EventHub.from_connection_string(conn)
    try:
        async with hub.receiver("1", owner_level=3, start=rxhubs.Position.earliest()) as receiver:
            assert len(await receiver.receive_batch(10, max_wait=5)) == 1
            assert emulator.faults.steal("h", "1", "$default") == 1
            with pytest.raises(OwnershipLostError):
                async with asyncio.timeout(20):
                    while True:
                        await receiver.receive_batch(10, max_wait=0.5)
    finally:
        await hub.close()
    stolen = _records(emulator, "detach", "amqp:link:stolen")
    assert [(r.partition_id, r.owner_level, r.consumer_group) for r in stolen] == [("1", 3, "$Default")]
    attach = _records(emulator, "attach")[0]
    assert attach.connection == stolen[0].connection and attach.time <= stolen[0].time
    assert emulator.faults.steal("h", "0") == 0  # nobody reads partition 0
    with pytest.raises(ConfigurationError, match="no partition '9'"):
        emulator.faults.steal("h", "9")


def test_force_close_closes_the_connections_with_links_to_the_hub(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"a": 1, "b": 1})
    with SyncReceiver(emulator.connection_string("a"), "0") as on_a, \
            SyncReceiver(emulator.connection_string("b"), "0") as on_b:
        assert _wait(lambda: len(_records(emulator, "attach")) == 2)
        assert emulator.faults.force_close(hub="a") == 1
        error = on_a.wait_error(20)
        assert error is not None and "amqp:connection:forced" in str(error), error
        assert on_b.errors == []
        assert [r.hub for r in _records(emulator, "detach", "amqp:connection:forced")] == ["a"]
        assert emulator.faults.force_close() >= 1  # every connection: b's too
        error = on_b.wait_error(20)
        assert error is not None and "amqp:connection:forced" in str(error), error


def test_added_partitions_are_live_and_durable_over_a_restart(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 4}, data_dir=tmp_path)
    conn = emulator.connection_string("h")
    with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as consumer:
        assert consumer.get_partition_ids() == ["0", "1", "2", "3"]
        emulator.faults.add_partitions("h", 6)
        assert consumer.get_partition_ids() == ["0", "1", "2", "3", "4", "5"]
    assert emulator.emulator.hubs == {"h": 6}
    _send(conn, "5")
    with SyncReceiver(conn, "5", starting_position="-1") as receiver:
        assert [e.body_as_str() for e in receiver.wait_events(1)] == ["to 5"]
    with pytest.raises(ConfigurationError, match="never removed"):
        emulator.faults.add_partitions("h", 5)
    emulator.restart()  # configured with 4: the hub keeps the 6 it grew to, and partition 5's event
    with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as consumer:
        assert consumer.get_partition_ids() == ["0", "1", "2", "3", "4", "5"]
        assert consumer.get_partition_properties("5")["last_enqueued_sequence_number"] == 0


def test_fault_calls_need_a_running_emulator() -> None:
    emulator = BackgroundEmulator({"h": 1})
    with emulator:
        faults = emulator.faults
    with pytest.raises(EmulatorError, match="not running"):
        faults.force_close()
    faults.clear()  # nothing in force: harmless when stopped
    assert faults.active == []


def _send(conn: str, partition_id: str) -> None:
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.send_event(EventData(f"to {partition_id}"), partition_id=partition_id)



def test_a_receiver_cut_by_server_busy_no_longer_holds_the_partition(emulator_factory: Any) -> None:
    """After a busy window detached an owner-level 7 receiver that did not come back, a receiver with a lower
    owner level may attach: the cut link left the partition's readers (a stale one would refuse it)."""
    emulator = emulator_factory(hubs={"h": 1})
    conn = emulator.connection_string("h")
    _send(conn, "0")
    with SyncReceiver(conn, "0", starting_position="-1", owner_level=7) as first:
        first.wait_events(1)
        emulator.faults.server_busy(60, on="flow")
        error = first.wait_error(20)
        assert error is not None and BUSY in str(error), error
    emulator.faults.clear()
    with SyncReceiver(conn, "0", starting_position="-1", owner_level=1) as second:
        assert [e.body_as_str() for e in second.wait_events(1)] == ["to 0"]
        assert second.errors == []
    assert emulator.faults.status()["consumer_links"] == {"h": 0}
