"""One consumer process of the state fault test: ``python -m tests.faults.state_worker OWNER OUT``.

Reads the hub of ``RXHUBS_TEST_EVENTHUB`` with ``rxhubs.consume`` through the SQLite checkpoint store
``RXHUBS_TEST_STORE`` (``sqlite:///path``, shared by every worker), counts events per (device, one-minute window
of event time) and writes each closed window's count to the results database ``RXHUBS_STATE_RESULTS`` (shared
too): upserted into ``cells`` (the latest value per cell), appended to ``emits`` (every emission, to find
re-emissions that disagree); events reported late go to ``late``. Then it checkpoints.

``RXHUBS_STATE_MODE`` picks the counting:

* ``window``: ``hops.window`` with its state committed with the checkpoint (the thing under test);
* ``memory``: the control, a plain per-process dict with no committed state. A crash or a handover loses the
  open windows' counts, so under kills it must produce wrong cells: that shows the checker detects errors.

Events are JSON: ``{"id", "d" (device), "t" (event time, epoch seconds), "late" (injected past grace)}``.
``OPEN partition`` / ``CLOSE partition reason`` lines in OUT mark ownership; SIGTERM stops it gracefully.
It prints ``ready`` once subscribed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops

WINDOW = 60.0  # seconds of event time
GRACE = 20.0
INTERVAL = 1.0
EXPIRY = 3.0
CHECKPOINT_INTERVAL = 0.5

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (device TEXT, window_start REAL, count INTEGER, PRIMARY KEY (device, window_start));
CREATE TABLE IF NOT EXISTS emits (device TEXT, window_start REAL, count INTEGER, owner TEXT, t REAL);
CREATE TABLE IF NOT EXISTS late (id TEXT PRIMARY KEY, partition_id TEXT, sequence_number INTEGER, owner TEXT);
"""


def window_start(t: float) -> float:
    """The start of the one-minute window holding event time ``t``."""
    return (t // WINDOW) * WINDOW


class Results:
    """The sink: upserts closed windows' counts, appends every emission, keeps the late events' ids."""

    def __init__(self, path: str, owner: str) -> None:
        self.owner = owner
        self.con = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self.con.execute("PRAGMA journal_mode=WAL")

    def write(self, cells: Iterable[tuple[str, float, int]], late: Iterable[tuple[str, str, int]]) -> None:
        cells, late = list(cells), list(late)
        if not cells and not late:
            return
        now = time.time()
        with self.con:
            self.con.execute("BEGIN IMMEDIATE")
            self.con.executemany(
                "INSERT INTO cells VALUES (?, ?, ?) "
                "ON CONFLICT (device, window_start) DO UPDATE SET count = excluded.count",
                cells,
            )
            self.con.executemany("INSERT INTO emits VALUES (?, ?, ?, ?, ?)", [(*c, self.owner, now) for c in cells])
            self.con.executemany("INSERT OR IGNORE INTO late VALUES (?, ?, ?, ?)", [(*x, self.owner) for x in late])


class MemoryCounts:
    """The control: per-partition open windows in this process's memory only, closed as the watermark passes."""

    def __init__(self, results: Results) -> None:
        self.results = results
        self.partitions: dict[str, tuple[float, dict[tuple[str, float], int]]] = {}

    def __call__(self, batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
        stream_time, open_ = self.partitions.get(batch.partition_id, (float("-inf"), {}))
        late = []
        for event in batch:
            body = event.body_as_json()
            start = window_start(body["t"])
            if start + WINDOW <= stream_time - GRACE:
                late.append((body["id"], batch.partition_id, event.sequence_number))
            elif not body["d"].startswith("end-"):
                open_[(body["d"], start)] = open_.get((body["d"], start), 0) + 1
            stream_time = max(stream_time, body["t"])
        closed = [(d, s, n) for (d, s), n in open_.items() if s + WINDOW <= stream_time - GRACE]
        for d, s, _ in closed:
            del open_[(d, s)]
        self.partitions[batch.partition_id] = (stream_time, open_)
        self.results.write(closed, late)
        return batch


def _windowed(results: Results) -> list[Any]:
    """``hops.window`` counting per device and minute of event time; its results and late events to the sink."""
    from rxhubs import windows as hw

    def sink(batch: Any) -> Any:
        cells = [(r.key, r.start.timestamp(), r.value) for r in batch.results if not r.key.startswith("end-")]
        late = [(e.body_as_json()["id"], batch.partition_id, e.sequence_number) for e in batch.late]
        results.write(cells, late)
        return batch

    return [
        hops.window(
            "per_device",
            key=lambda e: e.body_as_json()["d"],
            windows=hw.tumbling(WINDOW),
            aggregate=hw.count(),
            clock=hw.EventTime(lambda e: e.body_as_json()["t"]),
            grace=GRACE,
            emit="final",
            late="side",
        ),
        ops.map(sink),
    ]


def _counting(mode: str, results: Results) -> list[Any]:
    if mode == "memory":
        return [ops.map(MemoryCounts(results))]
    if mode == "window":
        return _windowed(results)
    raise SystemExit(f"unknown RXHUBS_STATE_MODE {mode!r}")


async def amain(owner: str, out: TextIO) -> None:
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_EVENTHUB"])
    store = rxhubs.stores.from_url(os.environ["RXHUBS_TEST_STORE"])
    results = Results(os.environ["RXHUBS_STATE_RESULTS"], owner)

    def note(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    source = rxhubs.consume(
        hub,
        "$Default",
        store,
        on_partition_initialize=lambda context: note(f"OPEN {context.partition_id}"),
        on_partition_close=lambda context, reason: note(f"CLOSE {context.partition_id} {reason.value}"),
        owner_id=owner,
        load_balancing_interval=INTERVAL,
        ownership_expiration=EXPIRY,
        max_wait=0.2,
        max_batch_size=20,
    )
    pipeline = source.pipe(
        *_counting(os.environ.get("RXHUBS_STATE_MODE", "window"), results),
        hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL),
    )
    print("ready", flush=True)
    try:
        await rxhubs.arun(pipeline, grace=10.0)
    finally:
        await hub.close()
        await store.close()


def main() -> None:
    # timestamped, with the balancing's INFO (claims, hands): a wrong cell can be traced to the owners of its partition
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(created).3f %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rxhubs.balancing").setLevel(logging.INFO)
    logging.getLogger("rxhubs.operators").setLevel(logging.INFO)  # "restored N keys" when a new owner restores
    owner, out = sys.argv[1], sys.argv[2]
    with open(out, "a", buffering=1) as sink:
        asyncio.run(amain(owner, sink))


if __name__ == "__main__":
    main()
