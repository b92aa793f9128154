"""Exactly once into SQLite: every event of the hub lands in the table once, even when it is read twice.

Starts a local emulator, sends 100 events to each of 2 partitions and consumes them into a SQLite table with
``hops.exactly_once``: the rows and each partition's position are committed in one transaction. Then 50 more
events per partition arrive, and a second consumer, whose checkpoint store is empty (lost), resumes from the
table's positions: it reads only the 100 new events. A third one reads without ``positions=`` from the very
start (as a stale checkpoint would make it): it reads all 300 events again, and the table gains nothing.
    python examples/exactly_once_sqlite.py
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
from pathlib import Path

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator


async def consume_all(hub: rxhubs.EventHub, table: rxhubs.tables.SqliteSink, expected: int, *,
                      resume_from_table: bool = True) -> list[str]:
    """Consume into ``table`` until ``expected`` events went through, then stop gracefully; the events read."""
    stop, read = rxhubs.Shutdown(), list[str]()

    def count(batch: rxhubs.EventBatch) -> None:
        read.extend(event.body_as_str() for event in batch)
        if len(read) >= expected:
            stop.request()

    store = rxhubs.stores.InMemoryCheckpointStore()  # a new, empty checkpoint store every time
    pipeline = rxhubs.consume(
        hub, "$Default", store, positions=table if resume_from_table else None, load_balancing_interval=1.0
    ).pipe(
        hops.exactly_once(table, max_interval=0.2),  # commit, then pass the batches on
        ops.do_action(count),
    )
    await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), timeout=120)
    return read


async def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
    async with Emulator(hubs={"orders": 2}) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("orders"))
        table = rxhubs.tables.sqlite(folder / "orders.db")
        try:
            for p in ("0", "1"):
                await hub.send([f"order {p}-{i}".encode() for i in range(100)], partition_id=p)
            first = await consume_all(hub, table, 200)
            for p in ("0", "1"):
                await hub.send([f"order {p}-{i}".encode() for i in range(100, 150)], partition_id=p)
            resumed = await consume_all(hub, table, 100)
            replayed = await consume_all(hub, table, 300, resume_from_table=False)
        finally:
            await table.close()
            await hub.close()
    with sqlite3.connect(folder / "orders.db") as db:
        rows, distinct = db.execute(
            'SELECT COUNT(*), COUNT(DISTINCT partition || \'/\' || "sequenceNumber") FROM rxhubs_events').fetchone()
        positions = dict(db.execute("SELECT partition_id, sequence_number FROM rxhubs_positions").fetchall())
    new = sorted(f"order {p}-{i}" for p in "01" for i in range(100, 150))
    only_new = sorted(resumed) == new
    print(f"read: {len(first)}, then {len(resumed)} (resumed from the table: only the new ones: {only_new}),"
          f" then {len(replayed)} (all again); the table holds {rows} rows, {distinct} distinct; positions {positions}")
    return 0 if rows == distinct == 300 and sorted(resumed) == new and positions == {"0": 149, "1": 149} else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
