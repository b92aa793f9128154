"""``hops.window`` over a backfill: the windowed counts across the switch from Capture to the hub are exact.

The event time is the device's own (in the body), so the counts over the plain events sent are the reference.
The consumer is stopped in the middle of the backfill (its window state committed with the checkpoint) and a
second one resumes there, reads the rest of Capture, switches to the hub and reads the live events.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.sources import Capture
from rxhubs.stores import InMemoryCheckpointStore

from .backfill_kit import FAST, HUB, PER_PARTITION, RETAINED, captured, emulator_with_history, run_until

pytestmark = pytest.mark.timeout(180)

BASE = 1_700_000_000  # the devices' clock, seconds since the epoch
LIVE = 100


def _body(i: int) -> str:
    ts = BASE + i // 100 if i < PER_PARTITION + LIVE else BASE + 3600  # the last one closes every window
    return json.dumps({"k": i % 3, "ts": ts})


async def _send(conn: str, first: int, count: int, chunk: int = 250) -> None:
    hub = rxhubs.EventHub.from_connection_string(conn)
    try:
        for lo in range(first, first + count, chunk):
            await hub.send([_body(i) for i in range(lo, min(first + count, lo + chunk))], partition_id="0")
    finally:
        await hub.close()


async def _slowly(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
    await asyncio.sleep(0.05)
    return batch


async def test_windowed_counts_across_a_stop_in_the_backfill_and_the_switch_match_the_plain_events(
    tmp_path: Path,
) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root, partitions=1)
    conn = emulator.connection_string(HUB)
    hub = rxhubs.EventHub.from_connection_string(conn)
    store = InMemoryCheckpointStore()
    results: list[tuple[int, int, int]] = []
    seqs: list[int] = []

    def pipeline(slow: bool) -> object:
        def keep(batch: object) -> None:
            seqs.extend(e.sequence_number for e in batch)  # type: ignore[attr-defined]
            results.extend((r.key, int(r.start.timestamp()), r.value) for r in batch.results)  # type: ignore[attr-defined]

        source = rxhubs.consume(hub, "$Default", store, backfill=capture, max_batch_size=100,
                                max_inflight=1 if slow else 16, **FAST)
        work = [hops.process(_slowly)] if slow else []
        return source.pipe(
            *work,
            hops.window("counts", key=lambda e: json.loads(e.body)["k"], windows=hw.tumbling(5),
                        aggregate=hw.count(), clock=hw.EventTime(lambda e: json.loads(e.body)["ts"])),
            ops.do_action(keep),
            hops.checkpoint(store, every=1, max_interval=0.0),
        )

    try:
        await _send(conn, 0, PER_PARTITION)
        await captured(Capture(root), 1, PER_PARTITION)
        shutil.copytree(root, tmp_path / "snapshot")  # what is sent later is only in the hub
        capture = Capture(tmp_path / "snapshot", poll_interval=0.2)
        await run_until(pipeline(slow=True), lambda: _at_least(seqs, 600))
        stopped_at = seqs[-1]
        assert stopped_at < PER_PARTITION - RETAINED  # the first consumer stopped inside the backfill

        async def live_then_done() -> bool:
            if seqs[-1] == PER_PARTITION - 1 and len(seqs) < PER_PARTITION + LIVE:
                await _send(conn, PER_PARTITION, LIVE + 1)  # the live events, then one far ahead to close all
            return seqs[-1] >= PER_PARTITION + LIVE

        await run_until(pipeline(slow=False), live_then_done)
    finally:
        await hub.close()
        emulator.stop()
    assert seqs == list(range(PER_PARTITION + LIVE + 1))  # each event once, in order, across the stop and the switch
    expected = Counter((i % 3, (BASE + i // 100) // 5 * 5) for i in range(PER_PARTITION + LIVE))
    got = Counter({(k, start): v for k, start, v in results})
    assert len(results) == len(got)  # each window closed once
    assert got == expected


async def _at_least(seqs: list[int], count: int) -> bool:
    return len(seqs) >= count
