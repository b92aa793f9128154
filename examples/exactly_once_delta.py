"""Exactly once into a Delta Lake table (no JVM): each event of the hub lands once, even when it is read twice.

Needs ``pip install 'rxhubs[delta]'``. Starts a local emulator, sends 100 JSON events to each of 2 partitions and
consumes them into a Delta table with ``hops.exactly_once``: one Delta commit holds the rows and, per partition,
an app transaction whose version is the partition's last sequence number. A ``transform`` parses the body into a
column. A second consumer with an empty (lost) checkpoint store and without ``positions=`` reads every event
again from the start: the table gains nothing. Then the table is read back with deltalake, as polars, DuckDB or
Spark would read it.
    python examples/exactly_once_delta.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator
from rxhubs.tables import DeltaSink, read_delta


def with_amount(rows: Any) -> Any:
    """Add a column parsed from each JSON body (runs on every commit's rows, before the write)."""
    amounts = [json.loads(body)["amount"] for body in rows.column("body").to_pylist()]
    return rows.append_column("amount", pa.array(amounts, pa.float64()))


async def consume_all(hub: rxhubs.EventHub, table: DeltaSink, expected: int, *, resume_from_table: bool) -> int:
    """Consume into ``table`` until ``expected`` events went through, then stop gracefully; how many were read."""
    stop, read = rxhubs.Shutdown(), [0]

    def count(batch: rxhubs.EventBatch) -> None:
        read[0] += len(batch)
        if read[0] >= expected:
            stop.request()

    store = rxhubs.stores.InMemoryCheckpointStore()  # a new, empty checkpoint store every time
    pipeline = rxhubs.consume(
        hub, "$Default", store, positions=table if resume_from_table else None, load_balancing_interval=1.0
    ).pipe(hops.exactly_once(table, max_interval=0.5), ops.do_action(count))
    await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), timeout=120)
    return read[0]


async def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
    async with Emulator(hubs={"orders": 2}) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("orders"))
        table = DeltaSink(folder / "orders", transform=with_amount)
        try:
            for p in ("0", "1"):
                await hub.send([json.dumps({"order": f"{p}-{i}", "amount": i / 2}).encode() for i in range(100)],
                               partition_id=p)
            first = await consume_all(hub, table, 200, resume_from_table=True)
            again = await consume_all(hub, table, 200, resume_from_table=False)
            context = rxhubs.PartitionContext(hub.fully_qualified_namespace, "orders", "$Default", "0")
        finally:
            await table.close()
            await hub.close()
    delta = DeltaTable(str(folder / "orders"))
    rows = read_delta(folder / "orders", ["partition", "sequenceNumber", "amount"])  # not to_pyarrow_table()
    distinct = len(set(zip(rows.column("partition").to_pylist(), rows.column("sequenceNumber").to_pylist(),
                           strict=True)))
    position = delta.transaction_version(DeltaSink.app_id(context))
    total = sum(rows.column("amount").to_pylist())
    print(f"read {first}, then {again} again; the table holds {rows.num_rows} rows ({distinct} distinct), "
          f"amount total {total}; partition 0's position {position} (app id {DeltaSink.app_id(context)})")
    return 0 if rows.num_rows == distinct == 200 and position == 99 and total == sum(range(100)) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
