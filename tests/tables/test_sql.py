"""SqlSink over real SQLite connections: filtering, compare-and-set conflicts, faults at each step, threads."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.tables import SqliteSink, SqlSink, sink_for
from tests.tables.kit import CTX, STEPS, FaultyConnection, Injected, events, table_numbers, table_position


def mine(_: object) -> bool:
    return True


def test_a_straddling_batch_writes_only_what_is_above_the_position(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "t.db")
    asyncio.run(sink.commit([events(0, 100)], owned=mine))
    result = asyncio.run(sink.commit([events(90, 120)], owned=mine))
    assert (result.written, result.skipped, result.positions) == ({"0": 20}, {"0": 11}, {"0": 120})
    again = asyncio.run(sink.commit([events(0, 120)], owned=mine))
    assert again.written == {"0": 0} and again.skipped == {"0": 121}
    assert table_numbers(tmp_path / "t.db") == list(range(121))
    assert asyncio.run(sink.positions([CTX["0"], CTX["1"]])) == {"0": 120, "1": None}
    asyncio.run(sink.close())


def test_rows_have_the_spark_connectors_columns(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "t.db")
    asyncio.run(sink.commit([events(5, 5, "2")], owned=mine))
    asyncio.run(sink.close())
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM rxhubs_events").fetchone())
    assert row == {"body": b"e5", "partition": "2", "offset": "5", "sequenceNumber": 5,
                   "enqueuedTime": "2026-01-01T00:00:00+00:00", "publisher": None, "partitionKey": None,
                   "properties": None, "systemProperties": None, "consumerGroup": "$Default", "eventHubName": "hub"}


@pytest.mark.parametrize("paramstyle", ["named", "numeric"])
def test_other_paramstyles_make_the_same_table(tmp_path: Path, paramstyle: str) -> None:
    db = sqlite3.connect(tmp_path / "t.db", check_same_thread=False)
    sink = SqlSink(lambda: db, paramstyle=paramstyle)  # type: ignore[arg-type]
    asyncio.run(sink.commit([events(0, 9), events(5, 14)], owned=mine))
    asyncio.run(sink.commit([events(12, 20)], owned=mine))
    assert table_numbers(tmp_path / "t.db") == list(range(21))
    assert table_position(tmp_path / "t.db") == 20


@pytest.mark.parametrize("step", STEPS)
def test_a_fault_at_any_step_then_a_retry_leaves_every_event_once(tmp_path: Path, step: str) -> None:
    connection = FaultyConnection(tmp_path / "t.db")
    sink = SqlSink(lambda: connection)
    asyncio.run(sink.commit([events(0, 9)], owned=mine))
    connection.armed.add(step)
    with pytest.raises(SinkError) as failed:
        asyncio.run(sink.commit([events(5, 19)], owned=mine))
    assert connection.felt == [step] and isinstance(failed.value.__cause__, Injected) and failed.value.retriable
    landed = table_numbers(tmp_path / "t.db")
    assert landed == (list(range(20)) if step == "commit_lost" else list(range(10)))  # all or nothing
    retry = asyncio.run(sink.commit([events(5, 19)], owned=mine))  # the operator retries the same batches
    assert retry.written == {"0": 0 if step == "commit_lost" else 10}
    assert table_numbers(tmp_path / "t.db") == list(range(20))


def test_a_zombie_commit_between_the_read_and_the_write_is_filtered_again(tmp_path: Path) -> None:
    zombie, owner = FaultyConnection(tmp_path / "t.db"), FaultyConnection(tmp_path / "t.db")
    zombie_sink, owner_sink = SqlSink(lambda: zombie), SqlSink(lambda: owner)
    asyncio.run(owner_sink.commit([events(0, 9)], owned=mine))
    # the zombie read position 9; before it writes, the new owner commits 10..30
    zombie.on_read = lambda: asyncio.run(owner_sink.commit([events(10, 30)], owned=mine))
    result = asyncio.run(zombie_sink.commit([events(10, 20)], owned=mine))
    assert zombie_sink.conflicts == 1  # the compare-and-set missed once
    assert result.written == {"0": 0} and result.positions == {"0": 30}
    assert table_numbers(tmp_path / "t.db") == list(range(31))


def test_two_first_writers_race_on_the_first_position(tmp_path: Path) -> None:
    zombie, owner = FaultyConnection(tmp_path / "t.db"), FaultyConnection(tmp_path / "t.db")
    zombie_sink, owner_sink = SqlSink(lambda: zombie), SqlSink(lambda: owner)
    asyncio.run(owner_sink.positions([CTX["0"]]))  # creates the tables
    zombie.on_read = lambda: asyncio.run(owner_sink.commit([events(0, 5)], owned=mine))
    result = asyncio.run(zombie_sink.commit([events(0, 8)], owned=mine))
    assert zombie_sink.conflicts == 1 and result.written == {"0": 3}
    assert table_numbers(tmp_path / "t.db") == list(range(9))


def test_a_partition_no_longer_owned_after_a_conflict_is_skipped(tmp_path: Path) -> None:
    zombie, owner = FaultyConnection(tmp_path / "t.db"), FaultyConnection(tmp_path / "t.db")
    zombie_sink, owner_sink = SqlSink(lambda: zombie), SqlSink(lambda: owner)
    asyncio.run(owner_sink.commit([events(0, 9)], owned=mine))
    asked: list[str] = []

    def owned(context: object) -> bool:
        asked.append("?")
        return len(asked) == 1  # owned at the first read, lost by the retry

    zombie.on_read = lambda: asyncio.run(owner_sink.commit([events(10, 12)], owned=mine))
    result = asyncio.run(zombie_sink.commit([events(10, 20)], owned=owned))
    assert len(asked) == 2 and result.written == {"0": 0} and result.skipped == {"0": 11}
    assert table_numbers(tmp_path / "t.db") == list(range(13))


def test_calls_run_on_the_sinks_worker_thread_under_asyncio(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "t.db")
    threads: list[str] = []

    def owned(_: object) -> bool:
        threads.append(threading.current_thread().name)
        return True

    async def main() -> None:
        await sink.commit([events(0, 3), events(0, 2, "1")], owned=owned)
        await sink.close()

    asyncio.run(main())
    assert threads and all(name.startswith("rxhubs-sql") for name in threads)
    with pytest.raises(SinkError):
        asyncio.run(sink.positions([CTX["0"]]))  # closed


def test_bad_configuration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SqlSink(lambda: None, table="events; DROP TABLE x")
    with pytest.raises(ConfigurationError):
        SqlSink(lambda: None, paramstyle="dollar")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SqlSink("not callable")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SqliteSink(tmp_path / "t.db", timeout=0)
    with pytest.raises(ConfigurationError):
        sink_for("sqlite:")
    assert sink_for("console") is None
