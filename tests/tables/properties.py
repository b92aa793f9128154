"""The property of tests/tables/test_sql_properties.py, over any database: see :func:`check`."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st

from rxhubs.errors import SinkError
from rxhubs.tables import SqlSink
from tests.tables.kit import CTX, STEPS, events

LAST = 59  # the partition holds events 0..59


class Faults(Protocol):
    """One writer's faults: armed by step name, ``felt`` when they fired; ``on_read`` runs after a read."""

    armed: set[str]
    felt: list[str]
    on_read: Callable[[], None] | None


class Database(Protocol):
    """Where the table lives: a new writer (its faults and its sink), and the table read back."""

    def writer(self) -> tuple[Faults, SqlSink]: ...

    def numbers(self) -> list[int]: ...

    def position(self) -> int | None: ...


@dataclass
class Writer:
    faults: Faults
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


#: Always run, whatever the search finds: the other writer commits inside each commit, each fault fires, and a
#: writer that lost the partition commits events past the table's position.
RACES_AND_FAULTS = [
    ("deliver", "a", 1, None, False), ("deliver", "a", 1, None, True), ("deliver", "b", 4, "before_write", True),
    ("deliver", "a", 5, "before_commit", True), ("resume", "b", 6, None, False),
    ("deliver", "b", 9, "commit_lost", False), ("lose", "a", 0, None, False), ("deliver", "a", 3, None, True),
    ("resume", "a", 12, None, False), ("deliver", "a", 20, "commit_lost", True),
    ("resume", "b", 0, None, False), ("lose", "b", 0, None, False), ("deliver", "b", 4, None, False),
]

step = st.one_of(
    st.tuples(st.just("deliver"), st.sampled_from("ab"), st.integers(1, 12), st.sampled_from((None, *STEPS)),
              st.booleans()),
    st.tuples(st.just("resume"), st.sampled_from("ab"), st.integers(0, 15), st.none(), st.booleans()),
    st.tuples(st.just("lose"), st.sampled_from("ab"), st.just(0), st.none(), st.booleans()),
)


def check(steps: list[tuple[Any, ...]], database: Database) -> Counter[str]:
    """Run ``steps`` with two writers on ``database``: after each step the table is an exact delivered prefix.

    Returns what was felt (each fault that fired and failed its commit; ``lost``: a commit by a writer that had
    lost the partition, with events past the table's position, that wrote nothing), for the caller to check
    across examples that every kind was met.
    """
    kinds: Counter[str] = Counter()
    writers = {}
    for name in "ab":
        writers[name] = Writer(*database.writer())
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
                writer.faults.armed.add(fault)
            racing = None
            if race:  # the other writer commits its next batch between this one's read and its write
                racing = other.deliver(3) if other.owned else None
                if racing is not None:
                    batch = events(*racing)
                    writer.faults.on_read = lambda b=batch, o=other: _commit(o, b)
            before, position = set(database.numbers()), database.position()
            try:
                asyncio.run(writer.sink.commit([events(*span)], owned=lambda _, w=writer: w.owned))
                if writer.owned:
                    writer.next = span[1] + 1
            except SinkError as exc:
                _not_the_harness(exc)
                felt += 1
                writer.faults.armed.clear()
                writer.resume(0)  # a crash: read again from the table
            if not writer.owned:  # a writer that lost the partition writes nothing (the other's batch may land)
                added = set(database.numbers()) - before
                assert added <= (set(range(racing[0], racing[1] + 1)) if racing else set()), sorted(added)
                if span[1] > (-1 if position is None else position):
                    kinds["lost"] += 1  # it had events past the position: owned, it would have written them
            writer.faults.on_read = None
            writer.faults.armed.clear()  # a fault not reached (nothing to write) is not carried over
        numbers, position = database.numbers(), database.position()
        assert numbers == list(range((-1 if position is None else position) + 1)), "a gap or a duplicate"
        assert set(numbers) <= writers["a"].delivered | writers["b"].delivered
    assert felt == sum(len(w.faults.felt) for w in writers.values())  # every armed fault that fired failed
    for w in writers.values():
        kinds.update(w.faults.felt)
    # drain: a fresh owner resumes from the table and delivers the rest, so the table is the whole partition
    final = writers["a"]
    final.resume(5)
    while (span := final.deliver(7)) is not None:
        asyncio.run(final.sink.commit([events(*span)], owned=lambda _: True))
        final.next = span[1] + 1
    assert database.numbers() == list(range(LAST + 1))
    for w in writers.values():
        asyncio.run(w.sink.close())
    return kinds


def _not_the_harness(error: SinkError) -> None:
    """Re-raise an ``AssertionError`` of the test's own harness that the sink wrapped (it is no fault felt)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, AssertionError):
            raise AssertionError(f"the harness failed inside a commit: {cause}") from error
        cause = cause.__cause__ or cause.__context__


def _commit(writer: Writer, batch: Any) -> None:
    try:
        asyncio.run(writer.sink.commit([batch], owned=lambda _: writer.owned))
        if writer.owned:
            writer.next = batch.events[-1].sequence_number + 1
    except SinkError as exc:
        _not_the_harness(exc)
        writer.faults.armed.clear()
        writer.resume(0)
