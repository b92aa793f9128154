"""A geo-replication promotion (``emulator.faults.promote()``), felt by the unmodified azure-eventhub client.

What the service does (docs/emulator.md, "Geo-replication"): every connection ends; sequence numbers carry over;
offsets become opaque strings of the new replication segment, for old events as for new; a position by an offset
of before the promotion is refused with ``com.microsoft:georeplication:invalid-offset``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from rxhubs.emulator import BackgroundEmulator, LinkRecord
from rxhubs.emulator._geo import INVALID_OFFSET
from rxhubs.errors import EmulatorError

from ._sdk import SyncReceiver, send

pytestmark = pytest.mark.timeout(90)


def _records(emulator: BackgroundEmulator, event: str, condition: str | None = None) -> list[LinkRecord]:
    return [r for r in emulator.link_log if r.event == event and (condition is None or r.condition == condition)]


def _wait(condition: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def _read(conn: str, **position: Any) -> list[EventData]:
    with SyncReceiver(conn, "0", **position) as receiver:
        receiver.wait_events(1, 10)
        assert not receiver.errors, receiver.errors
        time.sleep(0.3)  # anything more that is there
        return list(receiver.events)


def test_a_promotion_closes_connections_and_gives_every_event_an_offset_of_the_new_segment(
    emulator_factory: Any,
) -> None:
    emulator = emulator_factory(hubs={"geo": 1})
    conn = emulator.connection_string("geo")
    send(conn, ["a", "b", "c"], partition_id="0")
    before = _read(conn, starting_position="-1")
    assert [e.offset for e in before] == [str(int(e.offset)) for e in before]  # numeric before any promotion
    with SyncReceiver(conn, "0", starting_position="@latest") as live:
        assert _wait(lambda: len(_records(emulator, "attach")) == 2)  # the read before, and this one
        answer = emulator.faults.promote()
        error = live.wait_error(20)
    assert answer["segment"] == 1 and answer["closed"] >= 1
    assert error is not None and "amqp:connection:forced" in str(error) and "promoted" in str(error), error
    assert emulator.faults.status()["replication_segment"] == 1
    send(conn, ["d"], partition_id="0")
    after = _read(conn, starting_position="-1")
    assert [e.body_as_str() for e in after] == ["a", "b", "c", "d"]
    assert [e.sequence_number for e in after] == [0, 1, 2, 3]  # sequence numbers carry over
    assert [e.offset for e in after[:3]] == [f"1:0:{e.offset}" for e in before]  # old events: new-segment offsets
    assert after[3].offset is not None and after[3].offset.startswith("1:0:")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        assert producer.get_partition_properties("0")["last_enqueued_offset"] == after[3].offset


def test_positions_after_a_promotion_get_the_services_answers(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"geo": 1})
    conn = emulator.connection_string("geo")
    send(conn, ["a", "b", "c"], partition_id="0")
    old = _read(conn, starting_position="-1")
    emulator.faults.promote()
    new = _read(conn, starting_position="-1")
    # by sequence number and by time: as before
    assert [e.body_as_str() for e in _read(conn, starting_position=0)] == ["b", "c"]
    assert [e.body_as_str() for e in _read(conn, starting_position=new[1].enqueued_time,
                                           starting_position_inclusive=True)] == ["a", "b", "c"]
    # by an offset of the new segment: as before
    assert [e.body_as_str() for e in _read(conn, starting_position=new[0].offset)] == ["b", "c"]
    assert [e.body_as_str() for e in _read(conn, starting_position=new[1].offset,
                                           starting_position_inclusive=True)] == ["b", "c"]
    # by an offset of before the promotion: refused, the link never attaches
    with SyncReceiver(conn, "0", starting_position=old[0].offset) as stale:
        error = stale.wait_error(20)
    assert error is not None and INVALID_OFFSET in str(error), error
    refused = _records(emulator, "refuse", INVALID_OFFSET)
    assert refused and refused[0].partition_id == "0"
    emulator.faults.promote()  # a second promotion: the first segment's offsets are stale too
    with SyncReceiver(conn, "0", starting_position=new[0].offset) as stale:
        error = stale.wait_error(20)
    assert error is not None and INVALID_OFFSET in str(error), error
    assert str(_read(conn, starting_position="-1")[0].offset).startswith("2:0:")


def test_the_segment_is_kept_over_a_restart_and_old_offsets_stay_refused(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"geo": 2}, data_dir=tmp_path)
    conn = emulator.connection_string("geo")
    send(conn, ["a", "b"], partition_id="0")
    old = _read(conn, starting_position="-1")
    emulator.faults.promote()
    send(conn, ["c"], partition_id="0")
    emulator.restart()
    after = _read(conn, starting_position="-1")
    assert [e.body_as_str() for e in after] == ["a", "b", "c"]
    assert all(e.offset is not None and e.offset.startswith("1:0:") for e in after)
    assert (tmp_path / "replication_segment").read_text() == "1"
    with SyncReceiver(conn, "0", starting_position=old[1].offset) as stale:
        error = stale.wait_error(20)
    assert error is not None and INVALID_OFFSET in str(error), error


def test_promote_needs_a_running_emulator() -> None:
    emulator = BackgroundEmulator({"geo": 1})
    with pytest.raises(EmulatorError, match="not running"):
        emulator.faults.promote()
