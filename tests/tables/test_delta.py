"""DeltaSink against real Delta tables on disk (deltalake), read back with deltalake and pyarrow."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from rxhubs import PartitionContext
from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.spark import arrow_schema
from rxhubs.tables import DeltaSink, read_delta
from tests.tables.delta_support import batch, context, expected, log_actions, orphans, rows

ROOT = Path(__file__).resolve().parents[2]


def always(_: PartitionContext) -> bool:
    return True


async def test_one_commit_holds_the_rows_and_every_partitions_position(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path / "t")
    assert await sink.positions([context("0"), context("1")]) == {"0": None, "1": None}  # no table yet
    result = await sink.commit([batch("0", 0, 9), batch("1", 0, 4), batch("0", 10, 11)], owned=always)
    assert (result.written, result.skipped, result.positions) == ({"0": 12, "1": 5}, {"0": 0, "1": 0},
                                                                   {"0": 11, "1": 4})
    table = DeltaTable(str(tmp_path / "t"))
    assert result.version == table.version()
    assert rows(tmp_path / "t") == expected({"0": range(12), "1": range(5)})
    written = pa.schema(table.schema().to_arrow())  # the Spark connector's columns and types
    assert [(f.name, str(f.type)) for f in written] == [(f.name, str(f.type)) for f in arrow_schema()]
    # one commit carried the rows and both positions, each with lastUpdated (so a retention never drops it)
    txns = log_actions(tmp_path / "t", "txn")
    assert {t["appId"]: t["version"] for t in txns} == {
        "rxhubs/ns.example/telemetry/$default/0": 11, "rxhubs/ns.example/telemetry/$default/1": 4}
    assert all(isinstance(t["lastUpdated"], int) and t["lastUpdated"] > 1.7e12 for t in txns)
    assert table.history(1)[0]["operationMetrics"]["num_added_rows"] == 17
    assert table.metadata().configuration.get("delta.setTransactionRetentionDuration") is None
    # read back: by the sink, by a fresh one, and through deltalake directly
    assert await DeltaSink(tmp_path / "t").positions([context("1"), context("0"), context("2")]) == {
        "1": 4, "0": 11, "2": None}
    assert table.transaction_version(DeltaSink.app_id(context("0"))) == 11


async def test_a_batch_straddling_the_position_writes_only_what_is_after_it(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path / "t")
    await sink.commit([batch("0", 0, 100)], owned=always)
    again = await sink.commit([batch("0", 90, 120), batch("0", 110, 125), batch("1", 0, 2)], owned=always)
    assert again.written == {"0": 25, "1": 3} and again.skipped == {"0": 11 + 11, "1": 0}
    assert again.positions == {"0": 125, "1": 2}
    nothing = await sink.commit([batch("0", 50, 125)], owned=always)  # wholly in the table: no commit at all
    assert (nothing.written, nothing.skipped, nothing.version) == ({"0": 0}, {"0": 76}, again.version)
    assert rows(tmp_path / "t") == expected({"0": range(126), "1": range(3)})


async def test_the_position_passes_events_the_pipeline_filtered_out(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path / "t")
    # read 0..9, the pipeline kept 0..4: the position is 9, so a re-delivery of 5..9 is not written
    result = await sink.commit([batch("0", 0, 4, read_up_to=9)], owned=always)
    assert result.positions == {"0": 9} and result.written == {"0": 5}
    empty = await sink.commit([batch("0", 10, 9, read_up_to=15)], owned=always)  # nothing kept, read to 15
    assert empty.positions == {"0": 15} and empty.version == result.version + 1  # a commit of the txn alone
    await sink.commit([batch("0", 5, 20)], owned=always)
    assert rows(tmp_path / "t") == expected({"0": [*range(5), *range(16, 21)]})


async def test_two_writers_from_one_snapshot_one_conflicts_reloads_and_writes_no_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first = DeltaSink(path)
    await first.commit([batch("0", 0, 4)], owned=always)
    seen: list[list[int]] = []

    def race(table: Any) -> Any:
        seen.append(table.column("sequenceNumber").to_pylist())
        if len(seen) == 1:  # after the second writer read position 4, the first commits 5..9 of the same partition
            asyncio.run(first.commit([batch("0", 5, 9)], owned=always))
        return table

    second = DeltaSink(path, transform=race)
    result = await second.commit([batch("0", 3, 14), batch("1", 0, 1)], owned=always)
    # its first attempt wrote files for 5..14 and the commit failed; the retry filtered again against 9
    assert seen == [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 1], [10, 11, 12, 13, 14, 0, 1]]
    assert orphans(path), "the conflicting attempt's files should be on disk, unreferenced"
    assert result.written == {"0": 5, "1": 2} and result.positions == {"0": 14, "1": 1}
    assert rows(path) == expected({"0": range(15), "1": range(2)})


async def test_a_partition_lost_during_the_conflict_is_dropped_not_written(tmp_path: Path) -> None:
    path = tmp_path / "t"
    winner = DeltaSink(path)
    await winner.commit([batch("0", 0, 0)], owned=always)
    owned = {"0": True, "1": True}

    def race(table: Any) -> Any:
        if owned["0"]:  # partition 0 is handed over: its new owner commits, and this consumer learns it lost it
            asyncio.run(winner.commit([batch("0", 1, 3)], owned=always))
            owned["0"] = False
        return table

    zombie = DeltaSink(path, transform=race)
    result = await zombie.commit([batch("0", 1, 8), batch("1", 0, 2)], owned=lambda c: owned[c.partition_id])
    assert result.written == {"0": 0, "1": 3} and result.skipped == {"0": 8, "1": 0}
    assert result.positions == {"0": 3, "1": 2}
    assert rows(path) == expected({"0": range(4), "1": range(3)})


async def test_positions_survive_checkpoints_and_log_cleanup(tmp_path: Path) -> None:
    path = tmp_path / "t"
    settings = {"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds"}
    sink = DeltaSink(path, configuration=settings)
    await sink.commit([batch("0", 0, 9), batch("1", 0, 9)], owned=always)
    for n in range(1, 8):  # partition 0 never commits again: only checkpoints keep its position
        await sink.commit([batch("1", 10 * n, 10 * n + 9)], owned=always)
    log = sorted(p.name for p in (path / "_delta_log").iterdir())
    assert "00000000000000000000.json" not in log and any(n.endswith(".checkpoint.parquet") for n in log), log
    assert not [t for t in log_actions(path, "txn") if t["appId"].endswith("/0")]  # not in any JSON left
    fresh = DeltaSink(path)
    assert await fresh.positions([context("0"), context("1")]) == {"0": 9, "1": 79}
    checkpoint = sorted((path / "_delta_log").glob("*.checkpoint.parquet"))[-1]
    txns = [t for t in pq.read_table(checkpoint).column("txn").to_pylist() if t]
    assert {t["appId"].rsplit("/", 1)[1]: t["version"] for t in txns}["0"] == 9
    assert all(t["lastUpdated"] for t in txns)  # kept through the checkpoint
    again = await fresh.commit([batch("0", 0, 12)], owned=always)  # a replay after all that: only 10..12
    assert again.written == {"0": 3}
    assert rows(path) == expected({"0": range(13), "1": range(80)})


async def test_transform_shapes_the_rows_and_a_failing_one_commits_nothing(tmp_path: Path) -> None:
    def shape(table: Any) -> Any:
        return table.select(["partition", "sequenceNumber", "body"]).append_column(
            "size", pc.binary_length(table.column("body")))

    sink = DeltaSink(tmp_path / "t", transform=shape)
    await sink.commit([batch("0", 0, 2)], owned=always)
    table = read_delta(tmp_path / "t")
    assert table.column_names == ["partition", "sequenceNumber", "body", "size"]
    assert table.column("size").to_pylist() == [2, 2, 2]

    def broken(table: Any) -> Any:
        raise ValueError("no")

    with pytest.raises(SinkError, match="transform failed") as caught:
        await DeltaSink(tmp_path / "t", transform=broken).commit([batch("0", 3, 5)], owned=always)
    assert not caught.value.retriable
    assert await sink.positions([context("0")]) == {"0": 2}
    with pytest.raises(SinkError, match="schema") as mismatch:  # a transform that changed its schema
        await DeltaSink(tmp_path / "t").commit([batch("0", 3, 5)], owned=always)
    assert not mismatch.value.retriable
    assert rows(tmp_path / "t") == expected({"0": range(3)})


async def test_a_table_with_a_transaction_retention_is_warned_about(tmp_path: Path, caplog: Any) -> None:
    DeltaTable.create(str(tmp_path / "t"), pa.schema(arrow_schema()),
                      configuration={"delta.setTransactionRetentionDuration": "interval 1 days"})
    with caplog.at_level(logging.WARNING, "rxhubs.tables"):
        await DeltaSink(tmp_path / "t").commit([batch("0", 0, 0)], owned=always)
    assert "setTransactionRetentionDuration" in caplog.text and "written twice" in caplog.text


def test_bad_arguments_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="uri"):
        DeltaSink("")
    with pytest.raises(ConfigurationError, match="transform"):
        DeltaSink("x", transform="upper")  # type: ignore[arg-type]


def test_without_deltalake_the_package_imports_and_the_sink_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['deltalake'] = None\n"  # as if the extra were not installed
        "import rxhubs.tables\n"
        "try:\n    rxhubs.tables.DeltaSink('t')\n"
        "except rxhubs.errors.ConfigurationError as exc:\n    print('ERROR', exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "ERROR" in result.stdout and "pip install 'rxhubs[delta]'" in result.stdout
