"""One demo consumer process: consume -> sink (Spark Parquet or JSON lines) -> checkpoint.

Run as ``python -m rxhubs.demo._consumer``; the connection string comes from the environment variable
``RXHUBS_CONNECTION_STRING`` so it never shows in a process listing.
"""

from __future__ import annotations

import argparse
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
    hub: Any, store: Any, *, owner_id: str, out: Path, spark: bool, interval: float, expiry: float
) -> Observable[Any]:
    """The demo's pipeline: the shape a user's program has."""
    batches = rxhubs.consume(
        hub,
        "$Default",
        store,
        owner_id=owner_id,
        load_balancing_interval=interval,
        ownership_expiration=expiry,
        max_batch_size=500,
        max_wait=0.5,
    )
    if spark:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rxhubs-demo-consumer")
    parser.add_argument("--hub", required=True)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--owner-id", required=True)
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--expiry", type=float, default=6.0)
    parser.add_argument("--wait-for", type=Path, help="once ready, wait until this file exists, then consume")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.owner_id} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    conn = os.environ.get("RXHUBS_CONNECTION_STRING", "")
    try:
        hub = rxhubs.EventHub.from_connection_string(conn, eventhub_name=args.hub)
        store = SqliteCheckpointStore(args.store)
        pipeline = build_pipeline(
            hub, store, owner_id=args.owner_id, out=args.out, spark=args.spark,
            interval=args.interval, expiry=args.expiry,
        )
        (args.out / "ready").mkdir(exist_ok=True)
        (args.out / "ready" / args.owner_id).write_text("ready\n")  # the orchestrator waits for this
        while args.wait_for is not None and not args.wait_for.exists():
            time.sleep(0.1)
        rxhubs.run(pipeline, grace=60.0)
    except RxHubsError as exc:
        print(f"consumer {args.owner_id}: error: {exc}", file=sys.stderr)
        return 2
    log.info("stopped cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
