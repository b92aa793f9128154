"""Balanced consumers: two consumers of one group share a hub's partitions through one checkpoint store.

Starts a local emulator, sends 200 events to each of 4 partitions, runs two consumers (two owner ids, as two
processes would) on a SQLite store, and prints who owns what. Then the first stops gracefully: it releases
its partitions and the second takes them over at once, from their checkpoints.
    python examples/balanced_consumers.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections import Counter
from pathlib import Path

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator

OPTIONS = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0}


async def main() -> int:
    async with Emulator(hubs={"telemetry": 4}) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("telemetry"))
        for p in ("0", "1", "2", "3"):
            await hub.send([f"{p}-{i}".encode() for i in range(200)], partition_id=p)
        folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
        store = rxhubs.stores.SqliteCheckpointStore(folder / "balanced.sqlite")
        seen: Counter[str] = Counter()
        owners: dict[str, set[str]] = {"alice": set(), "bob": set()}

        def consumer(name: str) -> rxhubs.Shutdown:
            stop = rxhubs.Shutdown()
            pipeline = rxhubs.consume(hub, "$Default", store, owner_id=name, **OPTIONS).pipe(
                ops.do_action(lambda b: (owners[name].add(b.partition_id), seen.update(e.body_as_str() for e in b))),
                hops.checkpoint(store, max_interval=0.5),
            )
            asyncio.get_running_loop().create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
            return stop

        stop_alice = consumer("alice")
        stop_bob = consumer("bob")
        for _ in range(100):
            await asyncio.sleep(0.2)
            records = await store.list_ownership(hub.fully_qualified_namespace, "telemetry", "$Default")
            split = Counter(o.owner_id for o in records if o.owner_id)
            if split == Counter({"alice": 2, "bob": 2}):
                break
        print("ownership:", dict(split))
        stop_alice.request()  # alice leaves gracefully: checkpoints, then releases
        for _ in range(100):
            await asyncio.sleep(0.2)
            records = await store.list_ownership(hub.fully_qualified_namespace, "telemetry", "$Default")
            if Counter(o.owner_id for o in records if o.owner_id) == Counter({"bob": 4}):
                break
        await hub.send([b"after"] * 10, partition_id="0")
        for _ in range(50):
            if seen["after"] >= 10:
                break
            await asyncio.sleep(0.2)
        stop_bob.request()
        await asyncio.sleep(1.0)
        await hub.close()
        await store.close()
    missing = [f"{p}-{i}" for p in "0123" for i in range(200) if not seen[f"{p}-{i}"]]
    print(f"alice read {sorted(owners['alice'])}, bob read {sorted(owners['bob'])}; "
          f"events read: {sum(seen.values())}, missing: {len(missing)}")
    ok = split == Counter({"alice": 2, "bob": 2}) and not missing and seen["after"] >= 10
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
