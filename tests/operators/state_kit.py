"""Helpers for the tests of state committed with the checkpoint: a tiny stateful operator, and a store reader."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import reactivex
from reactivex import Observable, abc

from rxhubs import EventBatch, Ownership
from rxhubs.state._codec import OperatorState, StateDelta, decode
from rxhubs.stores import InMemoryCheckpointStore

FINGERPRINT = "count-v1"


def with_deltas(batch: EventBatch, *deltas: StateDelta) -> EventBatch:
    return dataclasses.replace(batch, _state=batch._state + deltas)


def counting(name: str = "counts", seen: list[Any] | None = None) -> Any:
    """A stateful operator in the shape ``hops.window`` has: counts events per body, per partition.

    On a period's first batch it restores its count from ``session.restored_state[name]`` (``seen`` records
    what it restored); every batch it passes on carries a :class:`StateDelta` of the keys it changed, and
    the total in its meta.
    """

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(observer: abc.ObserverBase[EventBatch], scheduler: abc.SchedulerBase | None = None) -> Any:
            live: dict[object, tuple[dict[str, int], int]] = {}

            def on_next(batch: EventBatch) -> None:
                session = batch._session
                if session not in live:
                    restored = session.restored_state if session is not None else None
                    op = (restored or {}).get(name)
                    live[session] = (dict(op.keys) if op else {}, int(op.meta.get("total", 0)) if op else 0)
                    if seen is not None:
                        seen.append((batch.partition_id, dict(op.keys) if op else None))
                counts, total = live[session]
                changes: dict[str, int] = {}
                for event in batch:
                    key = event.body.decode()
                    counts[key] = changes[key] = counts.get(key, 0) + 1
                total += len(batch)
                live[session] = (counts, total)
                observer.on_next(with_deltas(batch, StateDelta(name, FINGERPRINT, changes, {"total": total})))

            return source.subscribe(on_next, observer.on_error, observer.on_completed, scheduler=scheduler)

        return reactivex.create(subscribe)

    return operator


def read_pair(
    store: InMemoryCheckpointStore, ns: str, hub: str, partition_id: str, group: str = "$Default"
) -> tuple[int | None, dict[str, OperatorState] | None]:
    """The committed pair of a partition, read as a new owner would (it claims and fences: call it last)."""

    async def read() -> tuple[int | None, dict[str, OperatorState] | None]:
        [record] = [o for o in store.peek(ns, hub, group)[0] if o.partition_id == partition_id] or [None]
        etag = record.etag if record is not None else None
        [won] = await store.claim_ownership([Ownership(ns, hub, group, partition_id, "reader", etag=etag)])
        checkpoint, state = await store.fence_with_state(won)
        return (
            checkpoint.sequence_number if checkpoint is not None else None,
            decode(state) if state is not None else None,
        )

    return asyncio.run(read())
