"""Property: whatever the faults and re-deliveries, the SQL table holds each delivered event exactly once.

Writers deliver contiguous streams of batches from where they resume (the table's position, or earlier: a stale
checkpoint re-delivers up to 15 events below it, so batches straddle the position); any commit may fail before
its rows are written, after the rows but before COMMIT, or after COMMIT landed (the writer cannot tell), and a
failed writer resumes from the table, as a restarted consumer would. A second writer on the same partition (a
zombie: a paused former owner) commits inside the first one's transactions, between its read and its write,
and may lose its ownership. After every step the table is a prefix 0..position of the partition without
duplicates, and every event in it was delivered.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs.errors import SinkError
from rxhubs.tables import SqlSink
from tests.tables.kit import CTX, STEPS, FaultyConnection, events, table_numbers, table_position

LAST = 59  # the partition holds events 0..59


@dataclass
class Writer:
    connection: FaultyConnection
    sink: SqlSink
    next: int = 0
    owned: bool = True
    delivered: set[int] = field(default_factory=set)

    def resume(self, back: int) -> None:
        position = asyncio.run(self.sink.positions([CTX["0"]]))["0"]
        self.next = max(0, (-1 if position is None else position) + 1 - back)
        self.owned = True  # a new period of ownership

    def deliver(self, size: int) -> tuple[int, int] | None:
        if self.next > LAST:
            return None
        first, last = self.next, min(LAST, self.next + size - 1)
        self.delivered.update(range(first, last + 1))
        return first, last


step = st.one_of(
    st.tuples(st.just("deliver"), st.sampled_from("ab"), st.integers(1, 12), st.sampled_from((None, *STEPS)),
              st.booleans()),
    st.tuples(st.just("resume"), st.sampled_from("ab"), st.integers(0, 15), st.none(), st.booleans()),
    st.tuples(st.just("lose"), st.sampled_from("ab"), st.just(0), st.none(), st.booleans()),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=25))
def test_the_table_is_exactly_what_was_delivered_whatever_fails(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    path = Path(tempfile.mkdtemp()) / "t.db"
    writers = {}
    for name in "ab":
        connection = FaultyConnection(path)
        writers[name] = Writer(connection, SqlSink(lambda c=connection: c))
        writers[name].resume(0)  # each starts where the table is (and the tables exist)
    felt = 0
    for action, name, amount, fault, race in steps:
        writer, other = writers[name], writers["b" if name == "a" else "a"]
        if action == "resume":
            writer.resume(amount)
        elif action == "lose":
            writer.owned = False
        else:
            span = writer.deliver(amount)
            if span is None:
                continue
            if fault is not None:
                writer.connection.armed.add(fault)
            if race:  # the other writer commits its next batch between this one's read and its write
                racing = other.deliver(3) if other.owned else None
                if racing is not None:
                    batch = events(*racing)
                    writer.connection.on_read = lambda b=batch, o=other: _commit(o, b)
            try:
                asyncio.run(writer.sink.commit([events(*span)], owned=lambda _, w=writer: w.owned))
                if writer.owned:
                    writer.next = span[1] + 1
            except SinkError:
                felt += 1
                writer.connection.armed.clear()
                writer.resume(0)  # a crash: read again from the table
            writer.connection.on_read = None
            writer.connection.armed.clear()  # a fault not reached (nothing to write) is not carried over
        numbers, position = table_numbers(path), table_position(path)
        assert numbers == list(range((-1 if position is None else position) + 1)), "a gap or a duplicate"
        assert set(numbers) <= writers["a"].delivered | writers["b"].delivered
    assert felt == sum(len(w.connection.felt) for w in writers.values())  # every armed fault that fired failed
    # drain: a fresh owner resumes from the table and delivers the rest, so the table is the whole partition
    final = writers["a"]
    final.resume(5)
    while (span := final.deliver(7)) is not None:
        asyncio.run(final.sink.commit([events(*span)], owned=lambda _: True))
        final.next = span[1] + 1
    assert table_numbers(path) == list(range(LAST + 1))
    for w in writers.values():
        asyncio.run(w.sink.close())


def _commit(writer: Writer, batch: object) -> None:
    try:
        asyncio.run(writer.sink.commit([batch], owned=lambda _: writer.owned))  # type: ignore[list-item]
        if writer.owned:
            writer.next = batch.events[-1].sequence_number + 1  # type: ignore[attr-defined]
    except SinkError:
        writer.connection.armed.clear()
        writer.resume(0)
