"""An executor's read of a range over a real link (the emulator): straight from the frames, as the events give.

No Spark session: :func:`~rxhubs.spark._read.read_range` is what ``DataSourceReader.read`` runs on an executor.
The compiled path (the default where the package was built) must give the table the events' path gives, for
events of every shape the builder writes itself, takes the general way for, or leaves to the SDK (a delivery of
several frames); without extensions the source reads events, and says so once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.errors import RxHubsError
from rxhubs.spark import _arrow_read
from rxhubs.spark._arrow_batch import arrow_path, compiled_builder
from rxhubs.spark._ranges import SequenceRange
from rxhubs.spark._read import read_events, read_range
from rxhubs.spark._source_options import _Options
from tests.support.native import compiled_only

HUB = "hub"
BIG = bytes(range(256)) * 4095 + bytes(range(216))  # 1 MiB less 40 bytes: with the stamps, past one frame


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    return started


def fill(conn_str: str) -> int:
    """Events of every shape into partition 0; returns how many."""
    async def go() -> int:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            sent = 0
            for i in range(300):
                await hub.send([f"plain-{i}".encode()], partition_id="0")
                await hub.send([b"x" * (i % 7)], partition_id="0", properties={"tag": "t", "n": i, "ok": i % 2 == 0})
                await hub.send([b"f"], partition_id="0", properties={"ratio": i / 3, "raw": b"\xff\x00"})  # general
                sent += 3
            await hub.send([BIG], partition_id="0")  # a delivery of two frames (frames of 1 MiB): the SDK's
            await hub.send([b"after"], partition_id="0", properties={"last": True})
            return sent + 2

    return asyncio.run(go())


def table(batches: Any) -> Any:
    got = list(batches)
    for batch in got:
        batch.validate(full=True)
    return pa.Table.from_batches(got).combine_chunks()


@compiled_only
def test_a_range_read_from_the_frames_equals_the_events_path(emulator: BackgroundEmulator) -> None:
    assert compiled_builder() is not None, "the compiled Arrow builder was not built (make builds it)"
    assert arrow_path().startswith("frames to Arrow (compiled")
    conn_str = emulator.connection_string(HUB)
    total = fill(conn_str)
    opts = _Options({"connectionstring": conn_str, "prefetch": "100"})
    rows_before, bytes_before = _arrow_read.ROWS, _arrow_read.BYTES
    _arrow_read.ROWS, _arrow_read.BYTES = 128, 200_000  # many batches (cut by rows, and by bytes around BIG)
    try:
        for part in (SequenceRange("0", 0, total), SequenceRange("0", 250, 901), SequenceRange("0", 899, total - 1)):
            frames = table(read_range(opts, part))
            events = table(read_events(opts, part))
            assert frames.num_rows == part.end - part.start
            assert frames.column("sequenceNumber").to_pylist() == list(range(part.start, part.end))
            assert frames.equals(events)
    finally:
        _arrow_read.ROWS, _arrow_read.BYTES = rows_before, bytes_before
    big = frames.filter(pa.compute.equal(frames.column("sequenceNumber"), 900))
    assert big.column("body")[0].as_py() == BIG


@pytest.mark.parametrize("read", [read_range, read_events], ids=["as-built", "events-path"])
def test_a_range_the_hub_cannot_fill_times_out_where_the_hub_stopped(emulator: BackgroundEmulator, read: Any) -> None:
    # both paths hand Spark the rows they read before the wait runs out, then fail naming where the hub stopped
    conn_str = emulator.connection_string(HUB)
    fill(conn_str)
    opts = _Options({"connectionstring": conn_str, "receivetimeout": "0.5"})
    batches = read(opts, SequenceRange("0", 890, 1000))  # 890..901 exist
    got = next(batches)
    assert got.column("sequenceNumber").to_pylist() == list(range(890, 902))
    with pytest.raises(RxHubsError, match=r"no event for 0.5 s at sequence number 902 \(range 890..999\)"):
        next(batches)


_NO_EXTENSIONS = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
from rxhubs.spark._ranges import SequenceRange
from rxhubs.spark._read import read_range
from rxhubs.spark._source_options import _Options
opts = _Options({"connectionstring": sys.argv[1]})
rows = [sum(b.num_rows for b in read_range(opts, SequenceRange("0", s, s + 10))) for s in (0, 10)]
print(json.dumps(rows))
"""


def test_without_extensions_the_source_reads_events_and_says_so_once(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    fill(conn_str)
    env = {**os.environ, "RXHUBS_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", _NO_EXTENSIONS, conn_str], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [10, 10]
    said = [line for line in done.stderr.splitlines() if line.startswith("rxhubs.spark.source Spark source:")]
    assert said == ["rxhubs.spark.source Spark source: events to Arrow, pure Python (RXHUBS_NO_EXTENSIONS is set)"]


def test_a_task_hands_spark_batches_of_about_4_mib_so_the_jvm_works_while_the_worker_reads(
    emulator: BackgroundEmulator,
) -> None:
    # 6,000 events of 1 KB in one range: at most ~4 MiB of bodies per record batch (measured: 32 MiB batches cost
    # the worker 1.5-2 us more per event and left the JVM idle while the worker read; docs/spark.md, Costs)
    conn_str = emulator.connection_string(HUB)

    async def go() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for start in range(0, 6_000, 500):
                await hub.send([b"%06d" % i + b"x" * 1018 for i in range(start, start + 500)], partition_id="1")

    asyncio.run(go())
    batches = list(read_range(_Options({"connectionstring": conn_str}), SequenceRange("1", 0, 6_000)))
    sizes = [sum(len(b) for b in batch.column("body").to_pylist()) for batch in batches]
    assert sum(batch.num_rows for batch in batches) == 6_000
    assert len(batches) >= 2, sizes
    assert max(sizes) <= (4 << 20) + (256 << 10), sizes  # the limit, and what one chunk of frames may add
    assert [batch.column("body")[0].as_py()[:6] for batch in batches[:2]] == [b"000000", b"%06d" % batches[0].num_rows]


@pytest.mark.parametrize("build", ["python", "compiled"])
def test_the_link_stops_being_read_once_a_batchs_worth_is_held(build: str) -> None:
    # the receive loop reads on only while the sink has room: held to twice a batch, a late wake-up of the task on a
    # loaded machine let one batch grow past 4 MiB by several socket reads (CI, 2026-11-30: 4,740,096 bytes)
    from rxhubs.spark import _arrow_frames_py
    from rxhubs.spark._arrow_batch import slow_row

    if build == "compiled":
        module = compiled_builder()
        if module is None:
            pytest.skip("no compiled build here (the python case runs)")
    else:
        module = _arrow_frames_py
    for rows, body in ((_arrow_read.ROWS, b"x"), (_arrow_read.BYTES // 1024, b"x" * 1024)):
        sink = _arrow_read._Sink(module.FrameColumns(slow_row))
        for n in range(rows):
            assert sink.has_room(), (n, sink.columns.size())
            sink.columns.append_row(body, str(n), n, 0, None, None, [], [])
        assert not sink.has_room(), (rows, sink.columns.size())
        sink.columns.take()
        assert sink.has_room()
