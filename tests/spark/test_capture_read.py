"""``capturePath``: Spark reads the range before the hub's retention from Event Hubs Capture files, then the hub.

A hub of 2 partitions kept the last 500 of 2,000 events each; Capture holds all of them. A batch read and an
availableNow stream with ``capturePath`` read every event once (same columns); without it, only what is retained.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rxhubs.errors import ConfigurationError
from rxhubs.sources import Capture
from rxhubs.spark._source_options import _Options
from tests.sources.backfill_kit import HUB, PER_PARTITION, RETAINED, captured, emulator_with_history, fill

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _rows(df: Any) -> list[tuple[str, int, bytes]]:
    return [(r.partition, r.sequenceNumber, bytes(r.body)) for r in df.select("partition", "sequenceNumber",
                                                                               "body").collect()]


def _check_all(rows: list[tuple[str, int, bytes]]) -> None:
    counts = Counter((p, s) for p, s, _ in rows)
    assert set(counts) == {(p, s) for p in ("0", "1") for s in range(PER_PARTITION)}  # every event of the history
    assert max(counts.values()) == 1  # once
    assert all(body == f"{p}-{s}".encode() for p, s, body in rows)


def test_capture_path_reads_every_event_once_in_a_batch_read_and_a_stream(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "capture"
    emulator = emulator_with_history(root)
    try:
        conn = emulator.connection_string(HUB)
        asyncio.run(fill(conn, 2))
        asyncio.run(captured(Capture(root), 2, PER_PARTITION))
        plain = _rows(spark.read.format("eventhubs").option("connectionString", conn).load())
        assert len(plain) == 2 * RETAINED  # the hub alone: its retention
        batch = spark.read.format("eventhubs").option("connectionString", conn).option("capturePath", str(root))
        frame = batch.load()
        assert frame.columns == spark.read.format("eventhubs").option("connectionString", conn).load().columns
        _check_all(_rows(frame))
        query = (
            spark.readStream.format("eventhubs").option("connectionString", conn)
            .option("startingPosition", "earliest").option("capturePath", str(root)).load()
            .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True).start(str(tmp_path / "out"))
        )
        query.awaitTermination(200)
        assert not query.isActive and query.exception() is None
        _check_all(_rows(spark.read.parquet(str(tmp_path / "out"))))
    finally:
        emulator.stop()


def test_capture_options_are_checked() -> None:
    fake = ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0;"
            "EntityPath=h")
    assert _Options({"connectionString": fake, "capturePath": "/data/capture"}).capture_path == "/data/capture"
    with pytest.raises(ConfigurationError, match="go with capturePath"):
        _Options({"connectionString": fake, "captureNamespace": "ns"})
