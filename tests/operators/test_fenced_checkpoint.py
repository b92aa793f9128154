"""The checkpoint operator on a fenced store, in virtual time: a refused write drops only its partition."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Checkpoint, CloseReason, Event, EventBatch, Ownership, PartitionContext
from rxhubs import operators as hops
from rxhubs._rx import sleep
from rxhubs.balancing import PartitionSession
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test
from tests.balancing.kit import ProxyStore

CTX = PartitionContext("ns", "hub", "$Default", "0")


def _batch(seq: int, session: PartitionSession) -> EventBatch:
    event = Event(b"x", seq, str(seq * 10), dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    return EventBatch(CTX, (event,), None, None, session)


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


class _RefusesTheFirstPeriod(InMemoryCheckpointStore):
    """Answers the write of sequence number 0 after ``latency`` seconds with a refusal (a later period fenced it)."""

    def __init__(self, scheduler: TestScheduler, latency: float) -> None:
        super().__init__()
        self.scheduler, self.latency = scheduler, latency
        self.written: list[tuple[float, int]] = []

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        if checkpoint.sequence_number == 0:
            await sleep(self.latency)
            raise OwnershipLostError("partition '0' is not 'me''s any more (a later period of the same owner fenced"
                                     " the checkpoint)")
        self.written.append((self.scheduler.clock, checkpoint.sequence_number))
        await super().update_checkpoint(checkpoint)


def test_a_former_periods_write_refused_lets_the_current_periods_flush_write_and_finish() -> None:
    """Found at 1,024 partitions (`rxhubs bench scale --real`): an owner whose renewals went unanswered lost partitions
    while their checkpoint writes were in flight, claimed them again, and began handing them over; the old period's
    write came back refused (the new period's claim had fenced it), and the new period's flush, waiting behind that
    write, never finished: 93 partitions stayed draining, never released, for the rest of the run.

        batches      --a---b-c----------     a read in the first period, b and c in the second
        writes       --a (in flight 8 s: refused at 210), then c at once
        flush                 ^ (the second period's, at 209)
        flushed                ^ once c is sent and written (210)
    """
    with marble_test() as t:
        store = _RefusesTheFirstPeriod(t.scheduler, latency=8.0)
        first, second = PartitionSession(CTX), PartitionSession(CTX)
        source = {"a": _batch(0, first), "b": _batch(1, second), "c": _batch(2, second)}
        flushed: list[float] = []
        t.at(3.0, first.lose)  # expired while its write was in flight; then claimed again: `second`
        t.at(9.0, lambda: second.flush().subscribe(
            on_completed=lambda: flushed.append(t.scheduler.clock), scheduler=t.scheduler))
        t.start(t.hot("--a---b-c-----------------", source).pipe(hops.checkpoint(store, max_interval=30.0)))
        assert not first.owned  # the refusal was felt by the period it belonged to
        assert flushed == [210.0]  # the refusal came at 210 (202 + 8): the current position went out then
        assert store.written == [(210.0, 2)]


def test_an_early_flush_names_the_newest_position_while_an_older_write_waits_its_turn() -> None:
    """A handover's flush (``early``: the hand carries the position) does not wait for the write in flight.

    At 1,024 partitions on a loaded Azurite each partition had a periodic write waiting its turn (16 in flight per
    process) when its handover began, and the flush waited for that write's answer before it could send the last one:
    the releases came a median 24 s after the streams closed. The hand now carries the newest position at once.

        batches      -a-b---------         a's write takes 3 s; b arrives while it is in flight
        writes       -a--b                 b's write follows a's answer (204)
        flush            ^ (203.5)         early: names b at once
        final            b (203.5)
    """
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler, latency=3.0)
        session = PartitionSession(CTX)
        finished: list[float] = []
        t.at(3.5, lambda: session.flush(early=True).subscribe(
            on_completed=lambda: finished.append(t.scheduler.clock), scheduler=t.scheduler))
        t.start(t.hot("-a-b-----------", {"a": _batch(0, session), "b": _batch(1, session)}).pipe(
            hops.checkpoint(store, max_interval=0.5)))
        assert finished == [203.5] and session.final is not None and session.final.sequence_number == 1
        assert [(at, seq) for at, _, seq in store.writes] == [(201.0, 0), (204.0, 1)]  # b still written, after a


def test_an_older_write_refused_after_the_hand_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Once the hand carries the newest position, the store refuses the period's other writes (it handed the
    partition over): the write that was in flight then is what the handover meant, not a takeover to report."""
    with marble_test() as t:
        store = _RefusesTheFirstPeriod(t.scheduler, latency=3.0)
        session = PartitionSession(CTX)
        lost: list[str] = []
        session.bind(lambda *_: None, lambda *_: None, lambda s, operation, error: lost.append(operation))
        t.at(3.5, lambda: session.flush(early=True).subscribe(scheduler=t.scheduler))
        t.at(3.8, session.released)  # the release went out with the hand
        with caplog.at_level(logging.WARNING, logger="rxhubs.operators"):
            t.start(t.hot("-a-b-----------", {"a": _batch(0, session), "b": _batch(1, session)}).pipe(
                hops.checkpoint(store, max_interval=0.5)))
        assert session.final is not None and session.final.sequence_number == 1
        assert store.written == [(204.0, 1)]  # a refused at 204 (the hand), b, the last, still goes out
        assert lost == [] and not caplog.records
