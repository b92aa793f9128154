"""Operating a consumer group: its lag over HTTP, then a reset that makes it read everything again.

Starts a local emulator, sends 100 events to each of 2 partitions, consumes them all (checkpointing in SQLite),
serves the group's lag at http://127.0.0.1:PORT/metrics (Prometheus) and /lag (JSON, what KEDA's metrics-api
scaler reads), then resets the group to the earliest events (a dry run, then executed) and shows the lag again.
    python examples/operate_reset_and_lag.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import urllib.request
from pathlib import Path

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator
from rxhubs.operate import LagServer, reset_positions
from rxhubs.stores import SqliteCheckpointStore


def scrape(url: str) -> dict[str, object]:
    """What a monitor sees: the JSON form of the lag."""
    with urllib.request.urlopen(url + "/lag", timeout=30) as response:
        return dict(json.loads(response.read()))


async def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
    path = folder / "operate.sqlite"
    async with Emulator(hubs={"orders": 2}) as emulator:
        conn = emulator.connection_string("orders")
        hub = rxhubs.EventHub.from_connection_string(conn)
        for p in ("0", "1"):
            await hub.send([f"{p}-{i}".encode() for i in range(100)], partition_id=p)
        async with SqliteCheckpointStore(path) as store:
            done, stop = 0, rxhubs.Shutdown()

            def count(batch: rxhubs.EventBatch) -> None:
                nonlocal done
                done += len(batch)
                if done == 200:
                    stop.request()  # a graceful stop writes the last checkpoints

            pipeline = rxhubs.consume(hub, "$Default", store, load_balancing_interval=1.0).pipe(
                hops.process(count), hops.checkpoint(store))
            await rxhubs.arun(pipeline, shutdown=stop, signals=())

            lag = LagServer(lambda: rxhubs.EventHub.from_connection_string(conn), lambda: SqliteCheckpointStore(path),
                            "$Default", min_interval=0.0)
            with lag:
                before = await asyncio.to_thread(scrape, lag.url)
                print(f"after consuming everything: lag {before['lag']} (served at {lag.url}/metrics)")
                plan = await reset_positions(hub, store, to="earliest")
                print("dry run:\n" + plan.format())
                await reset_positions(hub, store, to="earliest", execute=True)
                after = await asyncio.to_thread(scrape, lag.url)
                print(f"after the reset: lag {after['lag']}")
        await hub.close()
    return 0 if before["lag"] == 0 and after["lag"] == 200 else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
