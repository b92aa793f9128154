"""One exactly-once trial in a fresh process: a pre-filled hub into Delta (exactly once) or JSON lines (at least once).

The connection string comes from RXHUBS_BENCH_SOURCE; prints one JSON object. Both sides read the hub from the
start with the same consume settings, in memory checkpoints every second after the sink:

* ``delta``: ``consume(..., positions=sink)`` -> ``hops.exactly_once(DeltaSink, max_interval=1.0)`` (one Delta
  commit a second, all partitions in it) -> ``hops.checkpoint``;
* ``jsonl``: ``consume`` -> ``jsonl_sink`` (each batch appended and fsynced) -> ``hops.checkpoint``;
  ``jsonl-nofsync``: the same without the fsync (deltalake does not fsync its local files either).

An event counts once the sink passed its batch on (written, and for Delta committed). Besides the rate it prints
the process's CPU per event (all threads) and ``tail_s``: from the last event read to the output that counted it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from rxhubs.bench.throughput._worker import Clock

SETTINGS: dict[str, Any] = {"max_batch_size": 500, "prefetch": 2000, "max_inflight": 32}


async def trial(impl: str, events: int, out: Path) -> dict[str, Any]:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs.operators._sinks import jsonl_sink
    from rxhubs.tables import DeltaSink

    clock = Clock(events)
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_SOURCE"])
    store = rxhubs.stores.InMemoryCheckpointStore()
    stop = rxhubs.Shutdown()
    commits = [0]

    last_read = [0.0]

    def read(batch: rxhubs.EventBatch) -> None:
        if batch.events:
            last_read[0] = time.perf_counter()

    def count(batch: rxhubs.EventBatch) -> None:
        if batch.events:
            clock.saw(len(batch.events))

    if impl == "delta":
        table = DeltaSink(out / "table")
        source = rxhubs.consume(hub, "$Default", store, positions=table, **SETTINGS)
        sink: Any = hops.exactly_once(table, max_interval=1.0)
    else:
        source = rxhubs.consume(hub, "$Default", store, **SETTINGS)
        sink = jsonl_sink(out / "events.jsonl", fsync=impl == "jsonl")
    pipeline: Any = source.pipe(
        ops.do_action(read), sink, ops.do_action(count), hops.checkpoint(store, max_interval=1.0)
    )
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await clock.done.wait()
    stop.request()
    await runner
    await hub.close()
    result = clock.result()
    # The wait from the last event read to the output that counted it: for Delta, the commit interval's tail.
    result["tail_s"] = round(clock.last - last_read[0], 3)
    if impl == "delta":
        from deltalake import DeltaTable

        delta = DeltaTable(str(out / "table"))
        result["rows"] = delta.count()
        commits[0] = delta.version()  # version 0 created the table
    else:
        with (out / "events.jsonl").open("rb") as lines:
            result["rows"] = sum(1 for _ in lines)
    result["commits"] = commits[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["delta", "jsonl", "jsonl-nofsync"], required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(trial(args.impl, args.events, args.out))), flush=True)


if __name__ == "__main__":
    main()
