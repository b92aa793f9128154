"""A handover waits for a slow sink (no duplicates), but not forever for a sink that never acknowledges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc

import rxhubs
from rxhubs import operators as hops
from rxhubs._rx import now
from rxhubs.balancing._stream import drain_timeout
from rxhubs.testing import marble_test, to_symbols

OPTIONS = {"load_balancing_interval": 2.0, "ownership_expiration": 6.0}


def slow_sink(
    delay: float | None, written: list[tuple[str, str]]
) -> Callable[[Observable[rxhubs.EventBatch]], Observable[rxhubs.EventBatch]]:
    """Holds each batch ``delay`` seconds before writing and passing it on (None: never)."""

    def operator(source: Observable[rxhubs.EventBatch]) -> Observable[rxhubs.EventBatch]:
        def subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> Any:
            assert scheduler is not None

            def on_next(batch: rxhubs.EventBatch) -> None:
                ack = batch.hold()
                if delay is None:
                    return

                def later(*_: Any) -> None:
                    written.append((batch.partition_id, to_symbols(batch)))
                    observer.on_next(batch)
                    ack()

                scheduler.schedule_relative(delay, later)

            return source.subscribe(on_next, observer.on_error, lambda: None, scheduler=scheduler)

        return reactivex.create(subscribe)

    return operator


def test_the_drain_bound_is_generous_next_to_the_expiry() -> None:
    assert drain_timeout(6.0) == 60.0
    assert drain_timeout(30.0) == 60.0
    assert drain_timeout(45.0) == 90.0


def test_a_sink_slower_than_the_expiry_still_hands_over_without_duplicates() -> None:
    letters = "abcdefghijklmnopqrstuvwxyz"
    with marble_test() as t:
        hub = t.hub({"0": "-" + "--".join(letters), "1": "-" + "--".join(letters)})
        store = t.store()
        written: list[tuple[str, str]] = []
        peer = t.peer(hub, store, "----------j", owner_id="peer", **OPTIONS)
        split = t.ownership_at(hub, store, 60)
        pipeline = rxhubs.consume(hub, "$Default", store, owner_id="me", max_inflight=4, **OPTIONS).pipe(
            slow_sink(15.0, written),  # 2.5 expirations per write
            hops.checkpoint(store, max_interval=1.0),
        )
        t.start(pipeline, disposed=400)
        assert sorted(split.values()) == ["me", "peer"]
        moved = next(p for p, owner in split.items() if owner == "peer")
        mine = "".join(s for p, s in written if p == moved)
        theirs = "".join(to_symbols(b) for b in peer.batches if b.partition_id == moved)
        assert mine and theirs
        assert set(mine).isdisjoint(theirs), "an event of the moved partition was processed by both owners"
        assert sorted(mine + theirs) == sorted(letters)  # and nothing was skipped


def test_a_sink_that_never_acknowledges_does_not_hold_the_partition_forever() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a", "1": "-x"})
        store = t.store()
        written: list[tuple[str, str]] = []
        peer = t.peer(hub, store, "----------j", owner_id="peer", **OPTIONS)
        stuck = t.ownership_at(hub, store, 40)
        freed = t.ownership_at(hub, store, 10 + drain_timeout(6.0) + 3 * 2.0)
        pipeline = rxhubs.consume(hub, "$Default", store, owner_id="me", **OPTIONS).pipe(slow_sink(None, written))
        t.start(pipeline, disposed=500)
        assert set(stuck.values()) == {"me"}  # still draining: not handed over yet
        assert sorted(freed.values()) == ["me", "peer"]  # the bound ran out: released after all
        assert written == []
        assert peer.symbols  # the peer read its partition from the start again (at least once)


class _Failing(rxhubs.testing.InMemoryEventHub):
    def __init__(self, error: Exception) -> None:
        super().__init__(partition_count=2)
        self.error = error
        self.attempts: list[float] = []

    async def get_partition_ids(self) -> Any:
        self.attempts.append(now())  # the virtual clock
        raise self.error


def test_an_unknown_hub_ends_the_stream_with_its_error_instead_of_retrying_for_ever() -> None:
    from rxhubs.errors import NotFoundError

    with marble_test() as t:
        hub = _Failing(NotFoundError("event hub 'nohub' not found"))
        results = t.start(rxhubs.consume(hub, "$Default", t.store(), **OPTIONS))
    assert [r.value.kind for r in results] == ["E"]
    assert len(hub.attempts) == 1  # not retried
    assert results[0].time == 200.0 and isinstance(results[0].value.exception, NotFoundError)


def test_a_transient_failure_to_read_the_partitions_is_retried() -> None:
    from rxhubs.errors import TransportError

    with marble_test() as t:
        hub = _Failing(TransportError("connection reset"))
        results = t.start(rxhubs.consume(hub, "$Default", t.store(), **OPTIONS), disposed=260)
    assert results == []  # still trying when disposed, no error
    # tried again and again (at most one balancing interval apart), up to the disposal
    assert len(hub.attempts) >= 10 and hub.attempts[-1] >= 260 - OPTIONS["load_balancing_interval"]


def test_an_unexpected_error_reading_the_partitions_is_retried_not_fatal() -> None:
    # an SDK hiccup seen during two consumers' start-up (the transport maps unknown SDK errors to a retriable
    # TransportError; an exception that is not an rxhubs error at all is presumed transient too)
    with marble_test() as t:
        hub = _Failing(RuntimeError("get properties of event hub 'telemetry': coroutine ignored GeneratorExit"))
        results = t.start(rxhubs.consume(hub, "$Default", t.store(), **OPTIONS), disposed=260)
    assert results == []
    # tried again and again (at most one balancing interval apart), up to the disposal
    assert len(hub.attempts) >= 10 and hub.attempts[-1] >= 260 - OPTIONS["load_balancing_interval"]
