"""Hub to hub: read readings from one hub, enrich them, publish them to another, checkpoint what was published.

Starts a local emulator with two hubs, ``readings`` and ``enriched`` (4 partitions each), sends 50 readings
from each of 8 devices (partition key: the device), and runs consume -> publish -> checkpoint: each reading is
converted to Fahrenheit and tagged; keys are kept, so a device's readings stay in order in one partition of
``enriched``. A reading that is not JSON makes its batch poison: the batch is dead-lettered whole to a third
hub, ``rejected``, each event with the error and its source position. A checkpoint comes only after the target
acknowledged what it covers (at-least-once).
    python examples/publish_hub_to_hub.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator

DEVICES = [f"device-{d}" for d in range(8)]
READINGS = 50


def to_fahrenheit(event: rxhubs.Event) -> bytes:
    """The transform: Celsius reading in, Fahrenheit reading out (a ValueError for a malformed body)."""
    reading = json.loads(event.body)
    return json.dumps({"device": event.partition_key, "f": round(reading["c"] * 9 / 5 + 32, 2)}).encode()


async def read(hub: rxhubs.EventHub) -> list[rxhubs.Event]:
    events: list[rxhubs.Event] = []
    for pid in await hub.get_partition_ids():
        last = (await hub.get_partition_properties(pid)).last_enqueued_sequence_number
        async with hub.receiver(pid) as receiver:
            got: list[rxhubs.Event] = []
            while len(got) <= last:
                got += await receiver.receive_batch(500, max_wait=1.0)
        events += got
    return events


async def main() -> int:
    async with Emulator(hubs={"readings": 4, "enriched": 4, "rejected": 1}) as emulator:
        source = rxhubs.EventHub.from_connection_string(emulator.connection_string("readings"))
        target = rxhubs.EventHub.from_connection_string(emulator.connection_string("enriched"))
        rejected = rxhubs.EventHub.from_connection_string(emulator.connection_string("rejected"))
        for device in DEVICES:
            await source.send([json.dumps({"c": 20 + n / 10}) for n in range(READINGS)], partition_key=device)
        await source.send([b"not json"], partition_key="device-0")
        folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
        store = rxhubs.stores.SqliteCheckpointStore(folder / "hub_to_hub.sqlite")

        pipeline = rxhubs.consume(source, "$Default", store, load_balancing_interval=1.0).pipe(
            hops.publish(
                target,
                body=to_fahrenheit,
                properties=lambda e: {**e.properties, "unit": "F"},
                on_poison=hops.dead_letter(rejected),  # a batch that cannot be published goes there, whole
            ),
            hops.checkpoint(store, max_interval=0.5),
        )
        stop = rxhubs.Shutdown()
        runner = asyncio.get_running_loop().create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
        expected = len(DEVICES) * READINGS + 1
        for _ in range(150):  # until every source event is checkpointed
            await asyncio.sleep(0.2)
            checkpoints = await store.list_checkpoints(source.fully_qualified_namespace, "readings", "$Default")
            if sum(c.sequence_number + 1 for c in checkpoints) == expected:
                break
        stop.request()
        await runner
        enriched, dead = await read(target), await read(rejected)
        for hub in (source, target, rejected):
            await hub.close()
        await store.close()

    per_device: dict[str, list[float]] = defaultdict(list)
    for event in enriched:
        per_device[str(event.partition_key)].append(event.body_as_json()["f"])
    in_order = all(values == sorted(values) for values in per_device.values())
    published = sum(len(v) for v in per_device.values())
    print(f"published {published} readings to 'enriched' ({len(per_device)} devices, in order: {in_order})")
    print(f"dead-lettered {len(dead)} readings to 'rejected' (the batch of the malformed one)")
    for event in dead:
        if event.body == b"not json":
            props = event.properties
            print(f"dead-lettered {event.body!r}: {props['rxhubs.error.type']} at partition "
                  f"{props['rxhubs.source.partition_id']}, sequence number {props['rxhubs.source.sequence_number']}")
    complete = published + len(dead) == expected
    ok = in_order and complete and any(e.body == b"not json" for e in dead)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
