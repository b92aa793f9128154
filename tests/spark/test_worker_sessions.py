"""A Python worker's later read tasks attach on a session opened ahead, and still read exactly their ranges.

No Spark session: :func:`~rxhubs.spark._read.read_range` is what an executor runs per task, here several times in
one process as a reused Python worker does. The emulator is real; its fault control closes the connections.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.spark._ranges import SequenceRange
from rxhubs.spark._read import read_range
from rxhubs.spark._source_options import _Options
from rxhubs.spark._worker_sessions import worker_sessions
from tests.support.native import compiled_only

HUB = "hub"


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    conn = started.connection_string(HUB)

    async def fill() -> None:
        async with rxhubs.EventHub.from_connection_string(conn) as hub:
            for p in ("0", "1"):
                await hub.send([f"{p}-{i}".encode() for i in range(400)], partition_id=p)

    asyncio.run(fill())
    return started


def rows(opts: _Options, part: SequenceRange) -> list[tuple[int, bytes]]:
    table = pa.Table.from_batches(list(read_range(opts, part)))
    return list(zip(table.column("sequenceNumber").to_pylist(), table.column("body").to_pylist(), strict=True))


def expected(part: SequenceRange) -> list[tuple[int, bytes]]:
    return [(i, f"{part.partition}-{i}".encode()) for i in range(part.start, part.end)]


@compiled_only  # sessions are opened ahead on the frames path (the compiled builder's)
def test_the_next_task_attaches_on_a_session_opened_ahead_and_reads_exactly_its_range(
    emulator: BackgroundEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_str = emulator.connection_string(HUB)
    opts = _Options({"connectionstring": conn_str, "prefetch": "50"})
    sessions = worker_sessions()
    adopted = sessions.adopted
    # ranges that do not continue one another: each link attaches at its own range's start
    parts = [SequenceRange("0", 0, 400), SequenceRange("1", 100, 300), SequenceRange("0", 250, 251),
             SequenceRange("0", 10, 20)]
    for part in parts:
        assert rows(opts, part) == expected(part)
        sessions.finish_opening()
    assert sessions.adopted - adopted == len(parts) - 1  # every task after the first skipped connect and auth

    monkeypatch.setenv("RXHUBS_SPARK_WARM", "0")  # turned off: tasks open their own connections
    adopted = sessions.adopted
    sessions.take(sessions.key(_Options({"connectionstring": conn_str})))  # (the one ready from before)
    assert rows(opts, SequenceRange("1", 0, 5)) == expected(SequenceRange("1", 0, 5))
    assert sessions.adopted == adopted


@compiled_only
def test_a_session_the_service_closed_between_tasks_is_not_used(emulator: BackgroundEmulator) -> None:
    opts = _Options({"connectionstring": emulator.connection_string(HUB)})
    sessions = worker_sessions()
    assert rows(opts, SequenceRange("0", 0, 100)) == expected(SequenceRange("0", 0, 100))
    sessions.finish_opening()
    assert sessions.key(opts) is not None
    closed = emulator.faults.force_close()  # the session ready for the next task, among them
    assert closed >= 1
    adopted = sessions.adopted
    assert rows(opts, SequenceRange("1", 50, 150)) == expected(SequenceRange("1", 50, 150))
    assert sessions.adopted == adopted  # the dead session was not used
