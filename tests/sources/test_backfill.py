"""``consume(..., backfill=Capture(...))`` against the emulator with retention and Capture: history, then live."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.errors import CaptureGapError
from rxhubs.sources import Capture
from rxhubs.stores import InMemoryCheckpointStore

from .backfill_kit import FAST, HUB, PER_PARTITION, RETAINED, Seen, captured, emulator_with_history, fill, run_until

pytestmark = pytest.mark.timeout(180)


async def test_backfill_from_the_start_reads_every_event_once_in_order_then_live(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root)
    conn = emulator.connection_string(HUB)
    hub = rxhubs.EventHub.from_connection_string(conn)
    try:
        await fill(conn, 2)
        await captured(Capture(root), 2, PER_PARTITION)
        # the backfill reads a copy of the files: the live events sent later are only in the hub
        shutil.copytree(root, tmp_path / "snapshot")
        capture = Capture(tmp_path / "snapshot", poll_interval=0.2)
        props = await hub.get_partition_properties("0")
        assert props.beginning_sequence_number == PER_PARTITION - RETAINED  # the hub lost the first 1,500
        seen = Seen()
        store = InMemoryCheckpointStore()
        pipeline = rxhubs.consume(hub, "$Default", store, backfill=capture, max_batch_size=300, **FAST).pipe(
            ops.do_action(seen), hops.checkpoint(store, max_interval=0.2))
        sent_live = False

        async def done() -> bool:
            nonlocal sent_live
            if not sent_live and seen.count() >= 2 * PER_PARTITION:
                await fill(conn, 2, count=50, first=PER_PARTITION)  # live events after the switch
                sent_live = True
            return seen.count() >= 2 * (PER_PARTITION + 50)

        await run_until(pipeline, done, timeout=120)
    finally:
        await hub.close()
        emulator.stop()
    for pid in ("0", "1"):
        assert seen.by_partition[pid] == list(range(PER_PARTITION + 50)), pid  # once each, in order, no gap
        assert seen.bodies[pid][0] == f"{pid}-0".encode() and seen.bodies[pid][-1] == f"{pid}-2049".encode()


async def test_a_checkpoint_taken_in_the_backfill_resumes_in_the_backfill(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root, partitions=1)
    conn = emulator.connection_string(HUB)
    hub = rxhubs.EventHub.from_connection_string(conn)
    capture = Capture(root, poll_interval=0.2)
    store = InMemoryCheckpointStore()
    try:
        await fill(conn, 1)
        await captured(capture, 1, PER_PARTITION)
        first = Seen()
        await run_until(
            rxhubs.consume(hub, "$Default", store, backfill=capture, max_batch_size=100, max_inflight=1,
                           **FAST).pipe(
                hops.process(_slowly), ops.do_action(first), hops.checkpoint(store, every=1, max_interval=0.0)),
            lambda: _at_least(first, 400))
        [checkpoint] = await store.list_checkpoints(hub.fully_qualified_namespace, HUB, "$Default")
        assert checkpoint.sequence_number < PER_PARTITION - RETAINED  # it stopped inside the backfill
        second = Seen()
        await run_until(
            rxhubs.consume(hub, "$Default", store, backfill=capture, **FAST).pipe(ops.do_action(second)),
            lambda: _at_least(second, PER_PARTITION - checkpoint.sequence_number - 1))
    finally:
        await hub.close()
        emulator.stop()
    assert second.by_partition["0"] == list(range(checkpoint.sequence_number + 1, PER_PARTITION))


async def test_a_datetime_start_before_the_retention_begins_in_capture(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root, partitions=1)
    conn = emulator.connection_string(HUB)
    hub = rxhubs.EventHub.from_connection_string(conn)
    capture = Capture(root, poll_interval=0.2)
    try:
        before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)
        await fill(conn, 1)
        await captured(capture, 1, PER_PARTITION)
        seen = Seen()
        await run_until(
            rxhubs.consume(hub, "$Default", InMemoryCheckpointStore(), backfill=capture, default_start=before,
                           **FAST).pipe(ops.do_action(seen)),
            lambda: _at_least(seen, PER_PARTITION))
    finally:
        await hub.close()
        emulator.stop()
    assert seen.by_partition["0"] == list(range(PER_PARTITION))


async def test_missing_capture_files_are_a_gap_error_naming_the_sequence_numbers(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root, partitions=1)
    conn = emulator.connection_string(HUB)
    hub = rxhubs.EventHub.from_connection_string(conn)
    capture = Capture(root, poll_interval=0.1, patience=0.5)
    errors: list[BaseException] = []
    try:
        for lo in range(0, PER_PARTITION, 500):  # a file per 500 events: the windows close between the sends
            await fill(conn, 1, count=500, first=lo, chunk=500)
            await captured(capture, 1, lo + 500)
        files = await capture.partition_files(HUB, "0")
        firsts = {f: [e.sequence_number for e in await capture.events(f)] for f in files}
        [middle] = [f for f, seqs in firsts.items() if seqs and seqs[0] == 500]
        assert firsts[middle] == list(range(500, 1000))
        dated = [f for f in files if firsts[f]]
        assert files.index(dated[2]) == await capture.skip_before(files, 1200)  # found by a binary search
        from_1200 = [e.sequence_number async for events in capture.read(HUB, "0", first=1200) for e in events]
        assert from_1200 == list(range(1200, PER_PARTITION))
        (root / middle).unlink()  # events 500..999 are gone from Capture, and the hub kept only 1500..1999
        seen = Seen()
        await run_until(
            rxhubs.consume(hub, "$Default", InMemoryCheckpointStore(), backfill=capture,
                           on_partition_error=lambda _c, e: errors.append(e), **FAST).pipe(ops.do_action(seen)),
            lambda: _true_when(bool(errors)))
    finally:
        await hub.close()
        emulator.stop()
    gap = next(e for e in errors if isinstance(e, CaptureGapError))
    assert (gap.partition_id, gap.first_missing, gap.last_missing) == ("0", 500, 999)
    assert "500..999" in str(gap)
    assert seen.by_partition["0"][:500] == list(range(500))  # what came before the gap was read
    assert all(s < 500 for s in seen.by_partition["0"])  # nothing after it: never a silent skip


async def _slowly(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
    await asyncio.sleep(0.05)
    return batch


async def _at_least(seen: Seen, count: int) -> bool:
    return seen.count() >= count


async def _true_when(value: Any) -> bool:
    return bool(value)
