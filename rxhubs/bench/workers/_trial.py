"""One ``workers`` trial in a fresh process: ``run_workers`` with N workers drains pre-filled partitions.

Run as ``python -m rxhubs.bench.workers._trial --workers N --store PATH --out DIR --events E``, with the hub's
connection string in RXHUBS_BENCH_EVENTHUB. Each worker notes its event count and its first and last event
times in ``DIR/<owner>.json`` after every batch; once all ``E`` events are in, the trial stops the workers
(as Ctrl-C would) and prints one JSON object: events, seconds from the first event to the last, events/s.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from reactivex import Observable
from reactivex import operators as ops

TUNED: dict[str, Any] = {"max_batch_size": 1000, "prefetch": 2000}


def pipeline(store_path: str, out: str, context: Any) -> Observable[Any]:
    """A worker: consume -> read each event's body and sequence number -> note progress -> checkpoint."""
    import rxhubs
    from rxhubs import operators as hops
    from rxhubs.stores import SqliteCheckpointStore

    hub = context.closing(rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"]))
    store = context.closing(SqliteCheckpointStore(store_path))
    progress = Path(out) / f"{context.owner_id}.json"
    state = {"events": 0, "first": 0.0, "last": 0.0}

    def note(batch: rxhubs.EventBatch) -> None:
        touched = [(e.body, e.sequence_number) for e in batch.events]
        now = time.time()
        state["first"] = state["first"] or now
        state["last"] = now
        state["events"] += len(touched)
        tmp = progress.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(progress)

    return rxhubs.consume(
        hub, "$Default", store, owner_id=context.owner_id, load_balancing_interval=1.0, **TUNED
    ).pipe(ops.do_action(note), hops.checkpoint(store, max_interval=5.0))


def _progress(out: Path) -> list[dict[str, float]]:
    states = []
    for path in out.glob("*.json"):
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return states


def main() -> None:
    import rxhubs

    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--events", type=int, required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def watch() -> None:
        while sum(s["events"] for s in _progress(out)) < args.events:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)  # stop the workers as Ctrl-C does

    threading.Thread(target=watch, daemon=True).start()
    summary = rxhubs.run_workers(
        functools.partial(pipeline, args.store, str(out)), workers=args.workers, owner_prefix="bench"
    )
    states = [s for s in _progress(out) if s["events"]]
    first, last = min(s["first"] for s in states), max(s["last"] for s in states)
    events = sum(s["events"] for s in states)
    print(json.dumps({
        "events": events, "seconds": last - first, "events_per_s": events / (last - first),
        "per_worker": [w.events for w in summary.workers], "ok": summary.ok,
    }), flush=True)


if __name__ == "__main__":
    main()
