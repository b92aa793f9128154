"""Batches and table reads for the Delta sink's tests (read back with deltalake and pyarrow only)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from rxhubs import Event, EventBatch, PartitionContext
from rxhubs._batch import Origin
from rxhubs.tables import read_delta

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def context(partition: str = "0", hub: str = "telemetry") -> PartitionContext:
    return PartitionContext("ns.example", hub, "$Default", partition)


def event(n: int) -> Event:
    return Event(f"e{n}".encode(), n, str(n * 100), T0 + dt.timedelta(milliseconds=n), properties={"n": n})


def batch(partition: str, first: int, last: int, *, read_up_to: int | None = None) -> EventBatch:
    """Events ``first..last`` of a partition; ``read_up_to``: the batch was read up to there (the rest filtered)."""
    events = tuple(event(n) for n in range(first, last + 1))
    if read_up_to is None:
        return EventBatch(context(partition), events)
    return EventBatch(context(partition), events, None, None, None, Origin(object(), 0, event(read_up_to)))


def rows(path: Path) -> Counter[tuple[str, int]]:
    """``(partition, sequenceNumber)`` -> how many rows the table holds for it."""
    table = read_delta(path, ["partition", "sequenceNumber"])
    return Counter(zip(table.column("partition").to_pylist(), table.column("sequenceNumber").to_pylist(),
                       strict=True))


def expected(spans: dict[str, range]) -> Counter[tuple[str, int]]:
    return Counter((p, n) for p, span in spans.items() for n in span)


def log_actions(path: Path, kind: str) -> list[dict[str, Any]]:
    """Every ``kind`` action (``txn``, ``add``...) of the JSON commits still in the log, oldest first."""
    found = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        for line in file.read_text().splitlines():
            action = json.loads(line)
            if kind in action:
                found.append(action[kind])
    return found


def is_table(path: Path) -> bool:
    return (path / "_delta_log").is_dir()


def orphans(path: Path) -> set[str]:
    """Parquet files in the table's folder that no commit of the table refers to (written, never committed)."""
    if not is_table(path):
        return set()
    referenced = {Path(uri).name for uri in DeltaTable(str(path)).file_uris()}
    return {f.name for f in path.glob("*.parquet")} - referenced
