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

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rxhubs.tables import SqlSink
from tests.tables.kit import STEPS, FaultyConnection, table_numbers, table_position
from tests.tables.properties import RACES_AND_FAULTS, check, step


class SqliteFile:
    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp()) / "t.db"

    def writer(self) -> tuple[FaultyConnection, SqlSink]:
        connection = FaultyConnection(self.path)
        return connection, SqlSink(lambda: connection)

    def numbers(self) -> list[int]:
        return table_numbers(self.path)

    def position(self) -> int | None:
        return table_position(self.path)


@pytest.mark.slow
def test_the_table_is_exactly_what_was_delivered_whatever_fails() -> None:
    felt: Counter[str] = Counter()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(step, min_size=1, max_size=25))
    @example(RACES_AND_FAULTS)
    def run(steps: list[tuple[Any, ...]]) -> None:
        felt.update(check(steps, SqliteFile()))

    run()
    assert set(felt) >= {*STEPS, "lost"}, felt  # every fault fired, and a writer that lost the partition committed
