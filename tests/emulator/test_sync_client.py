"""Conformance: the official sync azure-eventhub clients against the emulator."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import ConnectError, EventDataSendError, EventHubError

from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator._partition_key import partition_for_key

from ._sdk import SyncReceiver, close_all, send

pytestmark = pytest.mark.timeout(60)

HUB = "telemetry"
GROUPS = tuple(f"cg{i}" for i in range(8))  # at most 5 readers per partition and group: one group per reader


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[BackgroundEmulator, list[EventData]]]:
    """An emulator whose partition 0 holds 10 events sent in 3 batches (distinct enqueued times)."""
    with BackgroundEmulator({HUB: 4, "other": 1}, consumer_groups=("analytics", *GROUPS)) as emulator:
        conn = emulator.connection_string(HUB)
        with EventHubProducerClient.from_connection_string(conn) as producer:
            for start, stop in ((0, 4), (4, 7), (7, 10)):
                batch = producer.create_batch(partition_id="0")
                for i in range(start, stop):
                    batch.add(EventData(f"event-{i}"))
                producer.send_batch(batch)
                time.sleep(0.005)
        with SyncReceiver(conn, "0", starting_position="-1") as receiver:
            events = receiver.wait_events(10)
        yield emulator, events[:10]


def test_hub_properties(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    emulator, _ = loaded
    with EventHubProducerClient.from_connection_string(emulator.connection_string(HUB)) as producer:
        props = producer.get_eventhub_properties()
        assert props["eventhub_name"] == HUB
        assert props["partition_ids"] == ["0", "1", "2", "3"]
        assert props["created_at"].tzinfo is not None
        assert producer.get_partition_ids() == ["0", "1", "2", "3"]


def test_partition_properties(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    emulator, events = loaded
    with EventHubConsumerClient.from_connection_string(emulator.connection_string(HUB),
                                                       consumer_group="$Default") as client:
        full = client.get_partition_properties("0")
        empty = client.get_partition_properties("3")
    assert full["id"] == "0" and full["eventhub_name"] == HUB
    assert full["beginning_sequence_number"] == 0
    assert full["last_enqueued_sequence_number"] == 9
    assert full["last_enqueued_offset"] == events[-1].offset
    assert full["last_enqueued_time_utc"] == events[-1].enqueued_time
    assert full["is_empty"] is False
    assert empty["is_empty"] is True and empty["last_enqueued_sequence_number"] == -1
    assert empty["last_enqueued_offset"] == "-1"


def test_stored_events_carry_event_hubs_annotations(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    _, events = loaded
    assert [e.body_as_str() for e in events] == [f"event-{i}" for i in range(10)]
    assert [e.sequence_number for e in events] == list(range(10))
    offsets = [int(e.offset) for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    times = [e.enqueued_time for e in events]
    assert times == sorted(times) and times[0] < times[4] < times[7]
    assert all(t.tzinfo == datetime.UTC for t in times)


def test_start_positions(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    emulator, events = loaded
    cases: list[tuple[object, bool, int]] = [
        ("-1", False, 0),
        (events[3].offset, True, 3),
        (events[3].offset, False, 4),
        (5, True, 5),
        (5, False, 6),
        (-1, False, 0),
        (events[4].enqueued_time, True, 4),
        (events[4].enqueued_time, False, 7),
    ]
    conn = emulator.connection_string(HUB)
    receivers = [SyncReceiver(conn, "0", consumer_group=group, starting_position=position,
                              starting_position_inclusive=inclusive)
                 for group, (position, inclusive, _) in zip(GROUPS, cases, strict=True)]
    with contextlib.ExitStack() as stack:
        for receiver in receivers:
            stack.enter_context(receiver)
        got = [receiver.wait_events(10 - first) for receiver, (_, _, first) in zip(receivers, cases, strict=True)]
        close_all(receivers)
    for (position, inclusive, first), events_seen in zip(cases, got, strict=True):
        assert [e.sequence_number for e in events_seen] == list(range(first, 10)), (position, inclusive)


def test_latest_start_positions(emulator_factory) -> None:
    emulator = emulator_factory(hubs={HUB: 1})
    conn = emulator.connection_string(HUB)
    send(conn, ["old-0", "old-1"])
    # max_batch_size=1: the SDK holds a partial batch while events keep trickling in
    receivers = [SyncReceiver(conn, "0", starting_position="@latest", max_batch_size=1),
                 SyncReceiver(conn, "0", max_batch_size=1)]  # no starting position = latest
    with contextlib.ExitStack() as stack:
        for receiver in receivers:
            stack.enter_context(receiver)
        with EventHubProducerClient.from_connection_string(conn) as producer:
            for i in range(40):  # until both receivers are attached and see an event
                producer.send_event(EventData(f"new-{i}"))
                if all(r.wait_events(1, timeout=0.5) for r in receivers):
                    break
        got = [r.wait_events(1) for r in receivers]
        close_all(receivers)
    for events in got:
        assert events and all(e.body_as_str().startswith("new-") for e in events)


def test_send_modes(emulator_factory) -> None:
    emulator = emulator_factory(hubs={HUB: 4}, consumer_groups=("analytics",))
    conn = emulator.connection_string(HUB)
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for i in range(8):  # to the hub: the service spreads batches round robin
            batch = producer.create_batch()
            batch.add(EventData(f"rr-{i}"))
            producer.send_batch(batch)
        for _ in range(3):  # same key, same partition
            batch = producer.create_batch(partition_key="device-42")
            batch.add(EventData("keyed"))
            producer.send_batch(batch)
        batch = producer.create_batch(partition_id="2")
        for i in range(5):
            event = EventData(f"pinned-{i}")
            event.properties = {"n": i}
            batch.add(event)
        producer.send_batch(batch)
        producer.send_event(EventData("single"), partition_id="1")
        counts = {p: producer.get_partition_properties(p)["last_enqueued_sequence_number"] + 1 for p in "0123"}
    keyed = str(partition_for_key("device-42", 4))
    expected = {p: 2 for p in "0123"}
    expected[keyed] += 3
    expected["2"] += 5
    expected["1"] += 1
    assert counts == expected
    keyed_receiver = SyncReceiver(conn, keyed, starting_position="-1")
    pinned_receiver = SyncReceiver(conn, "2", consumer_group="analytics", starting_position="-1")
    with keyed_receiver, pinned_receiver:
        got = keyed_receiver.wait_events(expected[keyed])
        got_pinned = pinned_receiver.wait_events(7)
        close_all([keyed_receiver, pinned_receiver])
    keyed_events = [e for e in got if e.body_as_str() == "keyed"]
    assert len(keyed_events) == 3 and all(e.partition_key == b"device-42" for e in keyed_events)
    pinned = [e for e in got_pinned if e.body_as_str().startswith("pinned-")]
    assert [e.body_as_str() for e in pinned] == [f"pinned-{i}" for i in range(5)]
    assert [e.properties[b"n"] for e in pinned] == list(range(5))


def test_partition_key_hash_matches_the_sdk() -> None:
    from azure.eventhub._buffered_producer._partition_resolver import PartitionResolver

    resolver = PartitionResolver([str(i) for i in range(7)])
    for key in ["a", "device-42", "x" * 13, "0123456789ab", "é-unicode", "", "k" * 40]:
        if key:
            assert str(partition_for_key(key, 7)) == resolver.get_partition_id_by_partition_key(key), key


def test_oversized_event_is_rejected(emulator_factory) -> None:
    emulator = emulator_factory(hubs={HUB: 1})
    with EventHubProducerClient.from_connection_string(emulator.connection_string(HUB)) as producer:
        with pytest.raises(EventHubError) as info:
            producer.send_event(EventData(b"x" * (1024 * 1024 + 10)))
        assert isinstance(info.value, EventDataSendError) or "size" in str(info.value).lower()
        batch = producer.create_batch()
        assert batch.max_size_in_bytes == 1024 * 1024
        producer.send_event(EventData("small"))  # the link still works
        assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] == 0


def test_unknown_hub(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    emulator, _ = loaded
    conn = emulator.connection_string(HUB).replace(f"EntityPath={HUB}", "EntityPath=nope")
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        with pytest.raises(EventHubError):
            producer.get_eventhub_properties()
        with pytest.raises(ConnectError):
            producer.send_event(EventData("x"))


def test_unknown_partition_and_consumer_group(loaded: tuple[BackgroundEmulator, list[EventData]]) -> None:
    emulator, _ = loaded
    conn = emulator.connection_string(HUB)
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        with pytest.raises(EventHubError):
            producer.get_partition_properties("9")
        with pytest.raises(ConnectError):
            producer.send_event(EventData("x"), partition_id="9")
    receivers = [SyncReceiver(conn, "9", starting_position="-1"),
                 SyncReceiver(conn, "0", consumer_group="nobody", starting_position="-1"),
                 SyncReceiver(conn, "0", consumer_group="analytics", starting_position="-1")]
    with contextlib.ExitStack() as stack:
        for receiver in receivers:
            stack.enter_context(receiver)
        bad_partition, bad_group = receivers[0].wait_error(), receivers[1].wait_error()
        declared_group = receivers[2].wait_events(10)
        close_all(receivers)
    # the SDK checks the id against the partition ids the emulator reports (tests/emulator/test_protocol.py
    # covers the server's own amqp:not-found for such a link)
    assert isinstance(bad_partition, ValueError) and "['0', '1', '2', '3']" in str(bad_partition)
    assert bad_group is not None and "amqp:not-found" in str(bad_group)
    assert len(declared_group) >= 10
