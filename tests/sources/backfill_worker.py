"""One consumer process of the backfill fault test: ``python -m tests.sources.backfill_worker OWNER DIR``.

Reads the hub of ``RXHUBS_TEST_EVENTHUB`` with ``rxhubs.consume(..., backfill=Capture(RXHUBS_TEST_CAPTURE),
positions=sink)`` into the Delta table ``DIR/delta`` through ``hops.exactly_once``; ownership in the SQLite store
``DIR/store.sqlite`` that every consumer shares. Each batch waits ``RXHUBS_TEST_SLOW`` seconds, so the backfill
lasts long enough for the test's kills and handovers to land in it.

``DIR/OWNER.log`` gets one flushed line per fact: ``OPEN partition time``, ``CLOSE partition reason``,
``COMMIT partition position time``. It prints ``ready`` once subscribed; SIGTERM stops it gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.sources import Capture
from rxhubs.tables import DeltaSink


def _note(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


async def amain(owner: str, folder: Path, out: TextIO) -> None:
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_EVENTHUB"])
    store = rxhubs.stores.SqliteCheckpointStore(str(folder / "store.sqlite"))
    sink = DeltaSink(folder / "delta")
    pause = float(os.environ.get("RXHUBS_TEST_SLOW", "0"))

    async def slowly(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
        await asyncio.sleep(pause)
        return batch

    def committed(batch: rxhubs.EventBatch) -> None:  # exactly_once emits each batch once it is committed
        if batch.events:
            _note(out, f"COMMIT {batch.partition_id} {batch.last_sequence_number} {time.time():.3f}")

    pipeline = rxhubs.consume(
        hub, "$Default", store, positions=sink, backfill=Capture(os.environ["RXHUBS_TEST_CAPTURE"], poll_interval=0.2),
        owner_id=owner, load_balancing_interval=0.5, ownership_expiration=3.0, max_wait=0.2, max_batch_size=50,
        on_partition_initialize=lambda c: _note(out, f"OPEN {c.partition_id} {time.time():.3f}"),
        on_partition_close=lambda c, reason: _note(out, f"CLOSE {c.partition_id} {reason.value}"),
    ).pipe(hops.process(slowly), hops.exactly_once(sink, max_interval=0.3))
    print("ready", flush=True)
    try:
        await rxhubs.arun(pipeline.pipe(ops.do_action(committed)), grace=10.0)
    finally:
        await hub.close()
        await store.close()


def main() -> None:
    owner, folder = sys.argv[1], Path(sys.argv[2])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {owner} %(levelname)s %(name)s: %(message)s")
    with open(folder / f"{owner}.log", "a", buffering=1) as out:
        asyncio.run(amain(owner, folder, out))


if __name__ == "__main__":
    main()
