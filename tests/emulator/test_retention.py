"""Retention in the emulator, seen through the unmodified azure-eventhub client.

The service answers a read from an expired position with the first retained event (no error); the partition's
``beginning_sequence_number`` is where that is.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from rxhubs.emulator import BackgroundEmulator, Emulator
from rxhubs.emulator._hubs import Partition
from rxhubs.emulator._retention import Retention
from rxhubs.errors import ConfigurationError

from ._sdk import SyncReceiver

pytestmark = pytest.mark.timeout(90)

HUB = "telemetry"


def _send(conn: str, count: int, partition_id: str = "0", chunk: int = 250) -> None:
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for lo in range(0, count, chunk):
            batch = producer.create_batch(partition_id=partition_id)
            for i in range(lo, min(count, lo + chunk)):
                batch.add(EventData(f"e{i}"))
            producer.send_batch(batch)


def _props(conn: str, partition_id: str = "0") -> dict[str, object]:
    with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as client:
        return dict(client.get_partition_properties(partition_id))


def test_retain_events_moves_the_beginning_and_reads_start_there() -> None:
    with BackgroundEmulator({HUB: 2}, retain_events=500) as emulator:
        conn = emulator.connection_string(HUB)
        _send(conn, 2000)
        props = _props(conn)
        assert props["beginning_sequence_number"] == 1500
        assert props["last_enqueued_sequence_number"] == 1999
        assert props["is_empty"] is False
        assert _props(conn, "1")["is_empty"] is True  # the other partition is untouched
        with SyncReceiver(conn, "0", starting_position="-1") as earliest:
            got = earliest.wait_events(500)
        assert [e.sequence_number for e in got[:500]] == list(range(1500, 2000))
        assert got[0].body_as_str() == "e1500"
        # an expired position: the service starts at the first retained event, without an error
        with SyncReceiver(conn, "0", starting_position=100, starting_position_inclusive=True) as expired:
            got = expired.wait_events(3)
            assert not expired.errors
        assert got[0].sequence_number == 1500
        with SyncReceiver(conn, "0", starting_position=1600) as later:
            got = later.wait_events(3)
        assert got[0].sequence_number == 1601


def test_a_reader_left_behind_by_the_retention_goes_on_at_the_first_retained_event() -> None:
    with BackgroundEmulator({HUB: 1}, retain_events=100) as emulator:
        conn = emulator.connection_string(HUB)
        _send(conn, 50)
        with SyncReceiver(conn, "0", starting_position="-1", prefetch=10, max_batch_size=10) as reader:
            first = reader.wait_events(10)
            assert first[0].sequence_number == 0
            _send(conn, 1000, chunk=1000)  # one batch: events 0..949 expire while the reader is near the start
            got = reader.wait_events(200)
        seqs = [e.sequence_number for e in got]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert seqs[-1] >= 999 or len(seqs) >= 200
        jump = next(i for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1)
        assert seqs[jump] >= 950  # it skipped to what was retained when it asked again


def test_time_retention_expires_old_events_even_on_an_idle_hub() -> None:
    with BackgroundEmulator({HUB: 1}, retention=1.0) as emulator:
        conn = emulator.connection_string(HUB)
        _send(conn, 10)
        assert _props(conn)["beginning_sequence_number"] == 0
        deadline = time.monotonic() + 30
        while not _props(conn)["is_empty"]:  # the expiry round runs each second
            assert time.monotonic() < deadline, "events kept 1 s never expired"
            time.sleep(0.3)
        props = _props(conn)
        assert props["last_enqueued_sequence_number"] == 9  # the last event is still named
        assert props["beginning_sequence_number"] == 10
        _send(conn, 1)
        with SyncReceiver(conn, "0", starting_position="-1") as reader:
            got = reader.wait_events(1)
        assert [e.sequence_number for e in got] == [10]


def test_expiry_by_time_is_a_function_of_the_enqueued_times() -> None:
    part = Partition(HUB, "0", None, Retention(seconds=10.0))
    part.times.extend([1_000, 2_000, 12_000, 13_000])
    part.offsets.extend([8, 9, 10, 11])
    part.heads.extend([b""] * 4)
    part.bodies.extend([b""] * 4)
    assert part.expire(11_000) == 0  # enqueued at 1 s: exactly 10 s old at 11 s, kept
    assert part.expire(11_001) == 1
    assert part.expire(12_500) == 2
    assert part.expire(5_000) == 2  # the beginning never moves back
    assert part.expire(60_000) == 4 and part.next_sequence_number == 4 and part.last_sequence_number == 3


def test_expired_events_leave_memory() -> None:
    with BackgroundEmulator({HUB: 1}, retain_events=100) as emulator:
        conn = emulator.connection_string(HUB)
        _send(conn, 5000, chunk=500)
        server = emulator._running()._server
        assert server is not None
        part = server.hubs[HUB].partitions["0"]
        assert part.first == 4900
        assert len(part.bodies) < 2000  # dropped in chunks, not kept forever
        assert part.base + len(part.bodies) == 5000


def test_a_durable_log_keeps_its_retention_across_a_restart(tmp_path: Path) -> None:
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path, retain_events=30) as emulator:
        _send(emulator.connection_string(HUB), 100)
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path, retain_events=30) as emulator:
        conn = emulator.connection_string(HUB)
        props = _props(conn)
        assert (props["beginning_sequence_number"], props["last_enqueued_sequence_number"]) == (70, 99)
        _send(conn, 1)
        assert _props(conn)["beginning_sequence_number"] == 71


@pytest.mark.parametrize(("options", "message"), [
    ({"retention": 0}, "retention must be a number of seconds > 0"),
    ({"retain_events": 0}, "retain_events must be a whole number >= 1"),
    ({"retain_events": {"orders": 5}}, "unknown event hub(s) ['orders']"),
    ({"capture_window": -1}, "capture_window must be"),
    ({"capture": "blob://"}, "expected blob://CONTAINER"),
])
def test_bad_history_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        Emulator({HUB: 1}, **options)  # type: ignore[arg-type]
