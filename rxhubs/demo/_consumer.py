"""The demo's consumers: a pool of worker processes (``rxhubs.run_workers``), each consume -> sink -> checkpoint.

Run as ``python -m rxhubs.demo._consumer --workers N``; the connection string comes from the environment
variable ``RXHUBS_CONNECTION_STRING`` so it never shows in a process listing. Worker ``i`` has the owner id
``<prefix>-w{i}``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reactivex import Observable

import rxhubs
from rxhubs import operators as hops
from rxhubs.errors import RxHubsError
from rxhubs.operators._sinks import jsonl_sink
from rxhubs.stores import SqliteCheckpointStore

log = logging.getLogger("rxhubs.demo")


def build_pipeline(
    hub: Any, store: Any, *, owner_id: str, out: Path, spark: bool, interval: float, expiry: float,
    delta: Any = None,
) -> Observable[Any]:
    """The demo's pipeline: the shape a user's program has.

    With ``delta`` (a :class:`~rxhubs.tables.DeltaSink`): exactly once into it, reading on from its positions.
    """
    batches = rxhubs.consume(
        hub,
        "$Default",
        store,
        owner_id=owner_id,
        load_balancing_interval=interval,
        ownership_expiration=expiry,
        max_batch_size=500,
        max_wait=0.5,
        **({"positions": delta} if delta is not None else {}),
    )
    if delta is not None:
        sink = hops.exactly_once(delta, max_interval=1.0)  # the checkpoint after it only keeps lag current
    elif spark:
        from rxhubs import spark as rx_spark

        # One folder per consumer: Spark's file committer shares <path>/_temporary between writers, so two
        # processes appending to one path delete each other's uncommitted files (silently losing data).
        parquet = str(out / "parquet" / f"consumer={owner_id}")
        session = rx_spark.local_session(app_name=f"rxhubs-demo-{owner_id}")  # the JVM starts before any claim
        sink = rx_spark.write(
            lambda df: df.write.mode("append").parquet(parquet), spark=session, max_events=5_000, max_interval=2.0
        )
    else:
        sink = jsonl_sink(out / "jsonl" / f"{owner_id}.jsonl")
    pipeline: Observable[Any] = batches.pipe(sink, hops.checkpoint(store, max_interval=1.0))
    return pipeline


def worker_pipeline(settings: dict[str, Any], context: rxhubs.WorkerContext) -> Observable[Any]:
    """One worker of the demo's pool: its pipeline, ready once its Spark session is up.

    The late worker (``settings["late"]``) then waits, on its first start only, until the orchestrator
    writes its go file: it joins a third of the way through the run.
    """
    out = Path(settings["out"])
    owner = context.owner_id
    hub = context.closing(
        rxhubs.EventHub.from_connection_string(os.environ.get("RXHUBS_CONNECTION_STRING", ""),
                                               eventhub_name=settings["hub"])
    )
    store = context.closing(SqliteCheckpointStore(settings["store"]))
    delta = None
    if settings["delta"]:
        from rxhubs.tables import DeltaSink

        delta = context.closing(DeltaSink(settings["delta"]))
    pipeline = build_pipeline(
        hub, store, owner_id=owner, out=out, spark=settings["spark"],
        interval=settings["interval"], expiry=settings["expiry"], delta=delta,
    )
    (out / "ready").mkdir(exist_ok=True)
    (out / "ready" / owner).write_text(f"{os.getpid()}\n")  # the orchestrator waits for this, and signals it
    go = out / "go" / owner
    while context.index == settings["late"] and context.incarnation == 0 and not go.exists():
        time.sleep(0.1)
    log.info("%s consuming (incarnation %d)", owner, context.incarnation)
    return pipeline


def main(argv: Sequence[str] | None = None) -> int:
    """The demo's consumers: one ``rxhubs.run_workers`` pool; prints events per worker at the end."""
    parser = argparse.ArgumentParser(prog="rxhubs-demo-consumers")
    parser.add_argument("--hub", required=True)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--late", type=int, default=-1, help="this worker joins when its go file appears")
    parser.add_argument("--owner-prefix", default="demo", help="worker i's owner id is PREFIX-w{i}")
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--delta", default=None, help="exactly once into the Delta table at this path")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--expiry", type=float, default=6.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    settings = {
        "hub": args.hub, "store": str(args.store), "out": str(args.out), "late": args.late, "spark": args.spark,
        "delta": args.delta, "interval": args.interval, "expiry": args.expiry,
    }
    try:
        summary = rxhubs.run_workers(
            functools.partial(worker_pipeline, settings), workers=args.workers, owner_prefix=args.owner_prefix,
            grace=60.0,
        )
    except RxHubsError as exc:
        print(f"demo consumers: error: {exc}", file=sys.stderr)
        return 2
    (args.out / "workers.txt").write_text(f"{summary}\n")
    print(summary, flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
