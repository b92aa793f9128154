"""Pipeline factories for the worker tests (module level: they are sent to spawned worker processes).

``recording(conn, store_path, out, context)``: consume -> note each event as ``partition sequence owner`` in
``out/<owner>.<incarnation>.log`` (flushed per batch, so a SIGKILL loses no line) -> checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reactivex import Observable
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.stores import SqliteCheckpointStore

INTERVAL = 1.0
EXPIRY = 4.0


def recording(connection_string: str, store_path: str, out: str, context: rxhubs.WorkerContext) -> Observable[Any]:
    hub = context.closing(rxhubs.EventHub.from_connection_string(connection_string))
    store = context.closing(SqliteCheckpointStore(store_path))
    log = (Path(out) / f"{context.owner_id}.{context.incarnation}.log").open("a")

    def note(batch: rxhubs.EventBatch) -> None:
        log.write("".join(f"{batch.partition_id} {e.sequence_number} {context.owner_id}\n" for e in batch.events))
        log.flush()

    return rxhubs.consume(
        hub, "$Default", store, owner_id=context.owner_id, load_balancing_interval=INTERVAL,
        ownership_expiration=EXPIRY, max_wait=0.2,
    ).pipe(ops.do_action(note), hops.checkpoint(store, max_interval=0.5))


def failing(context: rxhubs.WorkerContext) -> Observable[Any]:
    raise RuntimeError(f"worker {context.index} cannot start (incarnation {context.incarnation})")


def not_a_pipeline(context: rxhubs.WorkerContext) -> Any:
    return 42


def idle(context: rxhubs.WorkerContext) -> Observable[Any]:
    """Consume an empty in-memory hub until stopped (a graceful stop completes it)."""
    from rxhubs.stores import InMemoryCheckpointStore
    from rxhubs.testing import InMemoryEventHub

    return rxhubs.consume(InMemoryEventHub(partition_count=2), "$Default", InMemoryCheckpointStore(),
                          owner_id=context.owner_id)


def thresholds(context: rxhubs.WorkerContext) -> Observable[Any]:
    """One item per worker: the collector's thresholds while its pipeline runs."""
    import gc

    import reactivex
    from reactivex import operators as ops

    return reactivex.of(0).pipe(ops.map(lambda _: gc.get_threshold()), ops.filter(lambda t: t == (50_000, 20, 100)))
