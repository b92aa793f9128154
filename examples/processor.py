"""The processor form: an EventProcessor per consumer, a PartitionProcessor per owned partition.

Two processors share one hub through one SQLite store; each PartitionProcessor parses its events, keeps a
running total, and checkpoints after every batch. The first processor stops halfway (it releases its
partitions at once) and the second takes them over from its checkpoints: every event is processed once.
Runs against a local emulator, so no cloud account is needed:
    python examples/processor.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable

import rxhubs
from rxhubs.emulator import Emulator

PARTITIONS, EVENTS = 4, 600
processed: Counter[tuple[str, int]] = Counter()
owned: dict[str, set[str]] = {"first": set(), "second": set()}


class Totals(rxhubs.PartitionProcessor):
    """Sums the ``n`` of each event of one partition; checkpoints after every batch."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def initialize(self, context: rxhubs.PartitionContext) -> None:
        self.total = 0
        owned[self.owner].add(context.partition_id)

    async def process_events(self, events: rxhubs.EventBatch, context: rxhubs.PartitionContext) -> None:
        for event in events:
            self.total += event.body_as_json()["n"]
            processed[(context.partition_id, event.sequence_number)] += 1
        if events:
            await self.update_checkpoint(events[-1])

    def process_error(self, error: Exception, context: rxhubs.PartitionContext) -> None:
        print(f"partition {context.partition_id}: {getattr(context, 'operation', '?')} failed: {error!r}")

    def close(self, reason: rxhubs.CloseReason, context: rxhubs.PartitionContext) -> None:
        owned[self.owner].discard(context.partition_id)
        print(f"{self.owner}: partition {context.partition_id} closed ({reason.value}), total {self.total}")


async def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll what the processors record (a demo; a real service would just run until stopped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition() and loop.time() < deadline:  # noqa: ASYNC110 - polling the demo's counters
        await asyncio.sleep(0.1)


async def main() -> int:
    folder = os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp()
    async with Emulator(hubs={"telemetry": PARTITIONS}) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("telemetry"))
        store = rxhubs.stores.SqliteCheckpointStore(os.path.join(folder, "checkpoints.sqlite"))
        options = {"load_balancing_interval": 1.0, "ownership_expiration": 4.0, "max_wait": 0.2}
        first = rxhubs.EventProcessor(hub, "$Default", lambda: Totals("first"), store, owner_id="first", **options)
        second = rxhubs.EventProcessor(hub, "$Default", lambda: Totals("second"), store, owner_id="second", **options)
        third = EVENTS // 3

        async def send(numbers: range) -> None:  # spread over the partitions
            for p in range(PARTITIONS):
                chunk = [json.dumps({"n": n}).encode() for n in numbers if n % PARTITIONS == p]
                await hub.send(chunk, partition_id=str(p))

        await first.start()
        await send(range(third))
        await wait_for(lambda: len(owned["first"]) == PARTITIONS)
        await second.start()  # the first hands half of its partitions over, gracefully
        await wait_for(lambda: len(owned["second"]) == PARTITIONS // 2)
        print("shared:", {name: sorted(ids) for name, ids in owned.items()})
        await send(range(third, 2 * third))
        await wait_for(lambda: len(processed) >= 2 * third)
        await first.stop()  # finishes its batches, closes its processors, checkpoints, releases at once
        print("first processor stopped:", not first.is_running)
        await wait_for(lambda: len(owned["second"]) == PARTITIONS)
        await send(range(2 * third, EVENTS))
        await wait_for(lambda: len(processed) >= EVENTS)
        await second.stop()
        await hub.close()
        await store.close()

    twice = sum(1 for count in processed.values() if count > 1)
    print(f"{len(processed)} of {EVENTS} events processed, {twice} twice")
    return 0 if len(processed) == EVENTS and twice == 0 else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
