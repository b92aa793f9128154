"""Property: with faults at every step of a commit and random re-delivery, the Delta table == what was delivered.

A run is a list of steps. Each step delivers one batch per chosen partition, starting anywhere from the table's
position + 1 back to the beginning (a re-delivery that straddles the position, or repeats it whole), and commits
them together with one fault:

* ``before_write``: the commit fails before anything is written (the transform raises);
* ``in_write``: the rows are handed to deltalake, which fails before the commit (the Arrow stream breaks at
  its end), as a crash between the files and the commit would;
* ``after_commit``: the commit lands and its result is lost, as a crash before the emit would;
* ``zombie``: another writer commits an overlapping batch of the same partition between this commit's read
  and its write (the conflicting attempt writes files, its commit fails, it reloads and filters again);
* ``lost``: another writer (the partition's new owner) commits only the next event, and this consumer learns
  meanwhile that it lost the partition: the rest of its batch must not be written.

After a failure the consumer "restarts" (a new sink, as a new process would make). After every step the table
holds every delivered event of a partition exactly once, 0..position with no gap, and nothing else.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs import EventBatch, PartitionContext
from rxhubs.errors import SinkError
from rxhubs.tables import DeltaSink
from tests.tables.delta_support import batch, context, is_table, orphans, rows

FAULTS = ["none", "before_write", "in_write", "after_commit", "zombie", "lost"]
PARTITIONS = ["0", "1", "2"]


class Faults:
    """The sink's transform: where the test's faults get in (a public seam: the transform runs before the write)."""

    def __init__(self) -> None:
        self.mode = "none"
        self.calls = 0
        self.race: Any = None  # called once, at the first attempt's write: another writer commits meanwhile

    def __call__(self, table: Any) -> Any:
        self.calls += 1
        if self.mode == "before_write":
            raise RuntimeError("fault: before the write")
        if self.mode == "in_write":
            def broken() -> Any:
                yield from table.to_batches()
                raise RuntimeError("fault: after the rows, before the commit")

            return pa.RecordBatchReader.from_batches(table.schema, broken())
        if self.race is not None:
            race, self.race = self.race, None
            race()
        return table


step = st.tuples(
    st.lists(st.sampled_from(PARTITIONS), min_size=1, max_size=3, unique=True),  # partitions of this commit
    st.lists(st.integers(0, 12), min_size=3, max_size=3),  # per partition: how far back before position + 1
    st.integers(1, 8),  # events per batch
    st.sampled_from(FAULTS),
)


async def _run(path: Path, steps: list[Any], felt: Counter[str]) -> None:
    # The model is the test's own: every event of a batch whose commit succeeded (or landed, result lost) is in
    # the table, once; a partition lost before the commit adds nothing. Nothing here is read from the sink's
    # results, which are only checked against it.
    faults = Faults()
    sink = DeltaSink(path, transform=faults)
    model: dict[str, set[int]] = {p: set() for p in PARTITIONS}
    owned = dict.fromkeys(PARTITIONS, True)

    def is_owned(c: PartitionContext) -> bool:
        return owned[c.partition_id]

    for partitions, backs, length, fault in steps:
        positions = await sink.positions([context(p) for p in PARTITIONS])
        _check(path, model, positions)
        batches: list[EventBatch] = []
        for p, back in zip(partitions, backs, strict=False):
            start = max(0, (positions[p] if positions[p] is not None else -1) + 1 - back)
            batches.append(batch(p, start, start + length - 1))
        owned.update(dict.fromkeys(PARTITIONS, True))
        faults.mode = fault if fault in ("before_write", "in_write") else "none"
        faults.calls = 0
        first = batches[0]
        orphaned = len(orphans(path))
        raced: list[int] = []
        faults.race = None
        # "lost": the new owner commits only the next event, so the batch keeps rows past the reloaded position
        # (a sink that wrote them after the loss would be caught); "zombie": it commits a superset
        next_one = (positions[first.partition_id] if positions[first.partition_id] is not None else -1) + 1
        past_the_race = first.events[-1].sequence_number > next_one
        if fault in ("zombie", "lost"):
            def race(first: EventBatch = first, fault: str = fault, raced: list[int] = raced,
                     next_one: int = next_one) -> None:
                # another owner (its own process: its own sink) commits an overlap of the same partition
                end = next_one if fault == "lost" else first.events[-1].sequence_number + 2
                other = batch(first.partition_id, first.events[0].sequence_number, end)
                done = asyncio.run(DeltaSink(path).commit([other], owned=lambda _: True))
                model[first.partition_id].update(e.sequence_number for e in other.events)
                raced.append(done.written[first.partition_id])
                if fault == "lost":
                    owned[first.partition_id] = False

            faults.race = race
        try:
            result = await sink.commit(batches, owned=is_owned)
        except SinkError:
            assert fault in ("before_write", "in_write"), fault
            felt[fault] += 1
            sink = DeltaSink(path, transform=faults)  # the process died: a new one starts
            faults.race = None
        else:
            assert fault not in ("before_write", "in_write") or faults.calls == 0, fault  # 0: nothing to write
            before = {p: set(n) for p, n in model.items()}  # the other writer's rows included
            for b in batches:
                if owned[b.partition_id]:
                    model[b.partition_id].update(e.sequence_number for e in b.events)
            for b in batches:  # what it says it wrote is what it added
                assert result.written[b.partition_id] == len(model[b.partition_id] - before[b.partition_id]), (
                    b.partition_id, result.written, fault)
            if fault == "lost" and raced and raced[0]:  # it conflicted, reloaded and saw the partition gone
                assert result.written[first.partition_id] == 0
                if past_the_race:  # rows past the new owner's commit were left unwritten
                    felt["lost"] += 1
            if fault == "after_commit":
                felt["after_commit"] += 1
                sink = DeltaSink(path, transform=faults)  # crashed before the emit: the result never arrives
            if len(orphans(path)) > orphaned:
                felt["conflict"] += 1  # an attempt wrote its files and lost the commit to the other writer
        _check(path, model, await DeltaSink(path).positions([context(p) for p in PARTITIONS]))
    # the final drain: a new process re-reads every partition from its beginning to past the table's position;
    # it writes exactly what lies past the position, and the table ends holding all of it once
    faults.mode, faults.race = "none", None
    sink = DeltaSink(path, transform=faults)
    positions = await sink.positions([context(p) for p in PARTITIONS])
    _check(path, model, positions)
    ends = {p: (positions[p] if positions[p] is not None else -1) + 3 for p in PARTITIONS}
    result = await sink.commit([batch(p, 0, ends[p]) for p in PARTITIONS], owned=lambda _: True)
    assert result.written == {p: ends[p] - max(model[p], default=-1) for p in PARTITIONS}, result.written
    for p in PARTITIONS:
        model[p].update(range(ends[p] + 1))
    _check(path, model, await DeltaSink(path).positions([context(p) for p in PARTITIONS]))


def _check(path: Path, model: dict[str, set[int]], positions: dict[str, int | None]) -> None:
    """The table holds what the model says, once each, and each partition's position is its last row."""
    table = rows(path) if is_table(path) else Counter()
    assert max(table.values(), default=1) == 1, "a duplicate row"
    for p in PARTITIONS:
        held = {n for (q, n) in table if q == p}
        assert held == model[p], (p, sorted(held ^ model[p]))
        assert positions[p] == max(model[p], default=None), (p, positions[p], max(model[p], default=None))


@pytest.mark.slow
def test_faults_at_every_step_of_a_commit_and_redelivery_keep_the_table_exact() -> None:
    felt: Counter[str] = Counter()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(st.lists(step, min_size=2, max_size=8))
    def run(steps: list[Any]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            asyncio.run(_run(Path(folder) / "t", steps, felt))

    run()
    # every kind of fault was met at least once across the examples (so the property was tested under each)
    assert set(felt) >= {"before_write", "in_write", "after_commit", "lost", "conflict"}, felt


def test_the_harness_sees_a_sink_that_does_not_filter(tmp_path: Path) -> None:
    """The invariant check itself: a writer that appends without filtering leaves duplicates it would catch."""
    from deltalake import write_deltalake

    from rxhubs.spark import to_arrow

    ctx = PartitionContext("ns.example", "telemetry", "$Default", "0")
    for _ in range(2):
        write_deltalake(str(tmp_path / "t"), to_arrow(EventBatch(ctx, batch("0", 0, 2).events)), mode="append")
    assert max(rows(tmp_path / "t").values()) == 2
