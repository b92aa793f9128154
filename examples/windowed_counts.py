"""Windowed counts: readings per device per minute of event time, upserted into a SQLite table.

Starts a local emulator and sends three minutes of readings from four devices (partition key = the device, so a
device stays in one partition; each reading carries its own time, a little out of order), then one reading that
comes too late. ``hops.window`` counts per device and minute; each window, once closed (its end plus the grace
period passed in event time), is upserted into the table ``counts (device, window_start, readings)`` and the
late reading is reported. The window state is committed with the checkpoint (SQLite store): a consumer that
crashes, or a partition that moves, goes on with exactly the counts it had. A window emitted again after a
crash carries the same value, so the upsert keeps one right row.
    python examples/windowed_counts.py
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.emulator import Emulator

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DEVICES = ["boiler", "fridge", "heat-pump", "meter"]


def readings() -> list[dict[str, object]]:
    """A reading every 5 s for 3 minutes per device, stamped up to 8 s late: out of order, inside the grace."""
    rng = random.Random(7)
    return [{"device": d, "time": (START + dt.timedelta(seconds=s + rng.uniform(0, 8))).isoformat(), "kwh": 0.1}
            for s in range(0, 180, 5) for d in DEVICES]


def minute(reading: dict[str, object]) -> dt.datetime:
    """The start of the minute a reading belongs to."""
    return dt.datetime.fromisoformat(str(reading["time"])).replace(second=0, microsecond=0)


def upsert(db: sqlite3.Connection, batch: hw.WindowBatch) -> None:
    """Write each closed window; a window emitted again (after a crash) overwrites itself with the same value."""
    db.executemany(
        "INSERT INTO counts VALUES (?, ?, ?) "
        "ON CONFLICT (device, window_start) DO UPDATE SET readings = excluded.readings",
        [(r.key, r.start.isoformat(), r.value) for r in batch.results],
    )
    db.commit()
    for event in batch.late:
        print("late:", event.body_as_str())


async def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
    db = sqlite3.connect(folder / "counts.sqlite")
    db.execute("CREATE TABLE IF NOT EXISTS counts (device TEXT, window_start TEXT, readings INTEGER, "
               "PRIMARY KEY (device, window_start))")
    async with Emulator(hubs={"readings": 4}) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("readings"))
        sent = readings()
        for reading in sent:
            await hub.send([json.dumps(reading)], partition_key=str(reading["device"]))
        late = {"device": "fridge", "time": (START + dt.timedelta(seconds=30)).isoformat(), "kwh": 0.1}
        await hub.send([json.dumps(late)], partition_key="fridge")  # its minute closed long ago
        store = rxhubs.stores.SqliteCheckpointStore(folder / "checkpoints.sqlite")
        stop = rxhubs.Shutdown()
        seen = 0

        def progress(batch: hw.WindowBatch) -> None:
            nonlocal seen
            seen += len(batch.events)
            if seen == 4 * 36 + 1:
                stop.request()

        pipeline = rxhubs.consume(hub, "$Default", store, max_wait=0.2).pipe(
            hops.window(
                "per_device",
                key=lambda e: e.body_as_json()["device"],
                windows=hw.tumbling(dt.timedelta(minutes=1)),
                aggregate=hw.count(),
                clock=hw.EventTime(lambda e: dt.datetime.fromisoformat(e.body_as_json()["time"])),
                grace=dt.timedelta(seconds=10),
            ),
            ops.do_action(lambda batch: (upsert(db, batch), progress(batch))),  # the sink, then the checkpoint
            hops.checkpoint(store, max_interval=1.0),
        )
        await rxhubs.arun(pipeline, shutdown=stop, signals=())
        await hub.close()
        await store.close()
    rows = db.execute("SELECT device, window_start, readings FROM counts ORDER BY device, window_start").fetchall()
    db.close()
    for row in rows:
        print(*row)
    # minutes 0 and 1 closed (stream time >= 175 s, minus 10 s of grace, is past 120 s); minute 2 is still open
    closed = START + dt.timedelta(minutes=2)
    expected = Counter((r["device"], minute(r).isoformat()) for r in sent if minute(r) < closed)
    return 0 if rows == sorted((d, m, n) for (d, m), n in expected.items()) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
