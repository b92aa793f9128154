"""The checkpoint operator on a fenced store, in virtual time: a refused write drops only its partition."""

from __future__ import annotations

from typing import Any

from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import CloseReason, Ownership
from rxhubs import operators as hops
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub


def test_a_write_refused_after_a_takeover_stops_that_partition_only_and_is_reported_once() -> None:
    hub = InMemoryEventHub(partition_count=2)
    store, scheduler = InMemoryCheckpointStore(), TestScheduler()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    errors: list[tuple[str, str, Exception]] = []
    closed: list[tuple[str, CloseReason]] = []
    outcome: list[Any] = []

    def on_error(context: Any, error: Exception) -> None:
        errors.append((context.partition_id, context.operation, error))

    pipeline = rxhubs.consume(
        hub,
        "$Default",
        store,
        owner_id="zombie",
        load_balancing_interval=10.0,  # it renews rarely: it cannot notice the takeover before it writes
        ownership_expiration=30.0,
        on_partition_error=on_error,
        on_partition_close=lambda context, reason: closed.append((context.partition_id, reason)),
    ).pipe(hops.checkpoint(store, max_interval=0.5))
    pipeline.subscribe(on_error=outcome.append, on_completed=lambda: outcome.append("done"), scheduler=scheduler)
    for pid in hub.partition_ids:
        hub.send([b"a", b"b"], partition_id=pid)
    scheduler.advance_to(1.0)
    assert {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]} == {"0": 1, "1": 1}

    # another consumer takes partition 0 over behind the zombie's back (as after a pause past the expiry)
    [record] = [o for o in store.peek(ns, name, "$Default")[0] if o.partition_id == "0"]
    [taken] = store.observe_claim_ownership([Ownership(ns, name, "$Default", "0", "other", etag=record.etag)]).run()
    for pid in hub.partition_ids:
        hub.send([b"c", b"d"], partition_id=pid)
    scheduler.advance_to(3.0)

    checkpoints = {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]}
    assert checkpoints == {"0": 1, "1": 3}  # 0 unchanged by the zombie; 1 goes on
    refused = [(pid, op) for pid, op, error in errors if isinstance(error, OwnershipLostError)]
    assert refused == [("0", "checkpoint")]  # reported once
    assert closed == [("0", CloseReason.OWNERSHIP_LOST)]
    assert outcome == []  # the pipeline did not fail
    hub.send([b"e"], partition_id="1")
    scheduler.advance_to(4.0)
    assert {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]}["1"] == 4
    owners = {o.partition_id: o.owner_id for o in store.peek(ns, name, "$Default")[0]}
    assert owners == {"0": "other", "1": "zombie"}  # nothing released on the other consumer's record
    assert taken.owner_id == "other"
