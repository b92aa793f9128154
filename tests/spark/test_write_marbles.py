"""rxhubs.spark.write in virtual time, without Spark: grouping by count and time, emission after the write,
one write at a time, retries and SinkError, heartbeats, completion, backpressure.

The writer gets what ``convert`` returns; here that is the batches' symbols (their bodies joined), so a
write is recorded as e.g. ``["ab", "cd"]``. ``slow(n)`` makes every write take ``n`` ticks of virtual time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops
from reactivex.notification import OnError, OnNext
from reactivex.testing import TestScheduler
from reactivex.testing.recorded import Recorded

import rxhubs
import rxhubs.spark
from rxhubs import Event, EventBatch, PartitionContext
from rxhubs.errors import ConfigurationError, RxHubsError, SinkError
from rxhubs.testing import MarbleTest, marble_test, symbols, to_symbols

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def names(batches: Sequence[EventBatch]) -> list[str]:
    return [to_symbols(b) for b in batches]


def slow(ticks: float) -> Callable[[Callable[[], Any]], Observable[Any]]:
    """A write runner under which every write takes ``ticks`` of virtual time: it runs the job at once and
    delivers its outcome ``ticks`` later."""

    def run(job: Callable[[], Any]) -> Observable[Any]:
        def start(_: Any) -> Observable[Any]:
            try:
                value = job()
            except Exception as exc:
                error = exc  # the name bound by ``except`` is deleted when the block ends
                return reactivex.timer(ticks).pipe(ops.flat_map(lambda _: reactivex.throw(error)))
            return reactivex.timer(ticks).pipe(ops.map(lambda _: value))

        return reactivex.defer(start)

    return run


class Recorder:
    """A writer that records the virtual time (ticks after subscription) and what it was given."""

    def __init__(self, t: MarbleTest, fail: Callable[[list[str]], Exception | None] | None = None) -> None:
        self.t = t
        self.calls: list[tuple[float, list[str]]] = []
        self.fail = fail

    def __call__(self, data: list[str]) -> None:
        self.calls.append((self.t.scheduler.clock - self.t.subscribed, data))
        error = self.fail(data) if self.fail else None
        if error is not None:
            raise error

    @property
    def writes(self) -> list[list[str]]:
        return [data for _, data in self.calls]


def sink(writer: Recorder, **options: Any) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    return rxhubs.spark.write(writer, convert=names, **options)


def timeline(records: list[Recorded[Any]], subscribed: float = 200.0) -> list[tuple[float, Any]]:
    out: list[tuple[float, Any]] = []
    for r in records:
        n = r.value
        value = n.value if isinstance(n, OnNext) else ("#" if isinstance(n, OnError) else "|")
        out.append((r.time - subscribed, value))
    return out


def make_batch(partition: str, *seqs: int, body: str | None = None) -> EventBatch:
    ctx = PartitionContext("ns", "telemetry", "$Default", partition)
    events = tuple(Event((body or f"{partition}{s}").encode(), s, str(s * 100), T0) for s in seqs)
    return EventBatch(ctx, events)


# -- grouping ----------------------------------------------------------------------------------------------


def test_micro_batches_are_sealed_by_count() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-ab--cd------ef-gh"})
        writer = Recorder(t)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=4, max_interval=50), symbols())
        )
        assert results == t.exp("-----(ab,cd)----(ef,gh)")
        assert writer.calls == [(5, ["ab", "cd"]), (16, ["ef", "gh"])]


def test_micro_batches_are_sealed_by_time_since_their_first_batch() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b------c"})
        writer = Recorder(t)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=100, max_interval=3), symbols())
        )
        assert results == t.exp("----(a,b)----c")
        assert writer.calls == [(4, ["a", "b"]), (13, ["c"])]


def test_partitions_share_micro_batches_and_each_keeps_its_order() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a--b--c--d", "1": "--x--y--z"})
        writer = Recorder(t)
        source = reactivex.merge(rxhubs.partition_batches(hub, "0"), rxhubs.partition_batches(hub, "1"))
        results = t.start(source.pipe(sink(writer, max_events=3, max_interval=50), symbols()))
        assert writer.calls == [(4, ["a", "x", "b"]), (8, ["y", "c", "z"]), (60, ["d"])]
        assert timeline(results) == [(4, "a"), (4, "x"), (4, "b"), (8, "y"), (8, "c"), (8, "z"), (60, "d")]


def test_the_last_micro_batch_is_written_when_the_source_completes() -> None:
    with marble_test() as t:
        a, b = make_batch("0", 0, body="a"), make_batch("0", 1, body="b")
        writer = Recorder(t)
        results = t.start(t.cold("-a-b-|", {"a": a, "b": b}).pipe(sink(writer, max_interval=50), symbols()))
        assert results == t.exp("-----(a,b,|)")
        assert writer.writes == [["a", "b"]]


def test_an_empty_source_completes_without_a_write() -> None:
    with marble_test() as t:
        writer = Recorder(t)
        assert t.start(t.cold("--|").pipe(sink(writer))) == t.exp("--|")
        assert writer.calls == []


# -- emission after the write, one write at a time ---------------------------------------------------------


def test_batches_are_emitted_only_when_their_write_returned() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-ab--cd"})
        writer = Recorder(t)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=2, executor=slow(2)), symbols())
        )
        assert [time for time, _ in writer.calls] == [1, 5]  # writes start when sealed ...
        assert results == t.exp("---ab--cd")  # ... and their batches leave 2 ticks later


def test_one_write_at_a_time_and_the_next_micro_batch_grows_meanwhile() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        writer = Recorder(t)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_interval=1, executor=slow(4)), symbols())
        )
        # "a" is sealed at 2 and written until 6; "b" is due at 4 but waits for that write, "c" joins it
        assert writer.calls == [(2, ["a"]), (6, ["b", "c"])]
        assert results == t.exp("------a---(b,c)")


def test_micro_batches_sealed_by_count_during_a_write_are_written_in_order() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c-d"})
        writer = Recorder(t)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=1, executor=slow(3)), symbols())
        )
        assert writer.calls == [(1, ["a"]), (4, ["b"]), (7, ["c"]), (10, ["d"])]
        assert timeline(results) == [(4, "a"), (7, "b"), (10, "c"), (13, "d")]


# -- failures ----------------------------------------------------------------------------------------------


def test_a_failed_write_is_retried_with_backoff_then_ends_the_stream_with_sink_error() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-c-d---e"})
        writer = Recorder(t, fail=lambda data: OSError("disk full") if "c" in data else None)
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=1, retries=2, backoff=1.0), symbols())
        )
        # attempts at 3, 4 (after 1 s) and 6 (after 2 s); "d" arrived meanwhile and is never emitted
        assert writer.calls == [(1, ["a"]), (3, ["c"]), (4, ["c"]), (6, ["c"])]
        assert timeline(results) == [(1, "a"), (6, "#")]
        error = results[-1].value.exception
        assert isinstance(error, SinkError)
        assert isinstance(error.__cause__, OSError)
        assert "1 events" in str(error) and "partitions 0" in str(error) and "3 attempt(s)" in str(error)
        assert "disk full" in str(error)


def test_a_write_that_succeeds_on_retry_is_emitted_then() -> None:
    with marble_test() as t:
        failures = iter([RuntimeError("flaky"), RuntimeError("flaky")])
        writer = Recorder(t, fail=lambda data: next(failures, None))
        hub = t.hub({"0": "-a"})
        backoff = rxhubs.sources.Backoff(initial=2.0).delay
        results = t.start(
            rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=1, backoff=backoff), symbols())
        )
        assert [time for time, _ in writer.calls] == [1, 3, 7]
        assert results == t.exp("-------a")


def test_a_non_retriable_rxhubs_error_from_the_writer_is_not_retried() -> None:
    with marble_test() as t:
        writer = Recorder(t, fail=lambda data: RxHubsError("schema mismatch", retriable=False))
        hub = t.hub({"0": "-a"})
        results = t.start(rxhubs.partition_batches(hub, "0").pipe(sink(writer, max_events=1), symbols()))
        assert len(writer.calls) == 1
        assert timeline(results) == [(1, "#")]
        assert isinstance(results[0].value.exception, SinkError)


def test_a_failing_conversion_or_transform_counts_as_a_failed_write() -> None:
    def convert(batches: Sequence[EventBatch]) -> Any:
        raise ValueError("cannot convert")

    with marble_test() as t:
        hub = t.hub({"0": "-a"})
        writes: list[Any] = []
        operator = rxhubs.spark.write(writes.append, convert=convert, max_events=1, retries=1, backoff=0.5)
        results = t.start(rxhubs.partition_batches(hub, "0").pipe(operator))
        assert writes == []
        assert [r.time for r in results] == [201.5]
        assert isinstance(results[0].value.exception.__cause__, ValueError)


def test_a_source_error_ends_the_stream_at_once_and_buffered_batches_are_not_emitted() -> None:
    with marble_test() as t:
        writer = Recorder(t)
        error = RuntimeError("source failed")
        source = reactivex.from_marbles("-a-#", timespan=1.0, lookup={"a": make_batch("0", 0)}, error=error)
        results = t.start(source.pipe(sink(writer, max_interval=50)))
        assert timeline(results) == [(3, "#")]
        assert results[0].value.exception is error
        assert writer.calls == []


# -- transform, heartbeats, disposal -----------------------------------------------------------------------


def test_transform_runs_on_the_converted_data_before_the_writer() -> None:
    with marble_test() as t:
        writer = Recorder(t)
        operator = rxhubs.spark.write(
            writer, convert=names, transform=lambda data: [s.upper() for s in data], max_events=2
        )
        hub = t.hub({"0": "-ab"})
        t.start(rxhubs.partition_batches(hub, "0").pipe(operator))
        assert writer.writes == [["AB"]]


def test_heartbeats_pass_through_or_wait_behind_their_partition() -> None:
    with marble_test() as t:
        a, idle0, idle1 = make_batch("0", 0), make_batch("0"), make_batch("1")
        lookup = {"a": a, "h": idle0, "i": idle1}
        writer = Recorder(t)
        # "i" (partition 1, nothing waiting) passes at once; "h" (partition 0, "a" waiting) follows "a"
        results = t.start(t.cold("-a-h-i", lookup).pipe(sink(writer, max_interval=10)))
        assert [(time, (b.partition_id, len(b))) for time, b in timeline(results)] == [
            (5, ("1", 0)),
            (11, ("0", 1)),
            (11, ("0", 0)),
        ]
        assert writer.writes == [["00", ""]]


def test_a_micro_batch_of_heartbeats_only_is_not_written() -> None:
    with marble_test() as t:
        a, idle = make_batch("0", 0), make_batch("0")
        writer = Recorder(t)
        results = t.start(t.cold("-a-h", {"a": a, "h": idle}).pipe(sink(writer, max_events=1, executor=slow(5))))
        # "a" is written from 1 to 6; "h" waits behind it, in a micro-batch of its own that needs no write
        assert [(time, len(b)) for time, b in timeline(results)] == [(6, 1), (6, 0)]
        assert writer.writes == [["00"]]


def test_disposal_during_a_write_emits_nothing_and_releases_the_held_batches() -> None:
    hub = rxhubs.testing.InMemoryEventHub(partition_count=1)
    hub.send(["a", "b", "c"], partition_id="0")
    scheduler = TestScheduler()
    seen: list[str] = []
    writes: list[list[str]] = []
    source = rxhubs.partition_batches(hub, "0", max_batch_size=1, max_inflight=2)
    subscription = source.pipe(
        rxhubs.spark.write(writes.append, convert=names, max_events=1, executor=slow(5)), symbols()
    ).subscribe(seen.append, scheduler=scheduler)
    scheduler.advance_to(2.0)
    assert writes == [["a"]] and seen == []
    subscription.dispose()
    scheduler.advance_to(20.0)
    assert writes == [["a"]] and seen == []


# -- backpressure ------------------------------------------------------------------------------------------


def test_the_sink_holds_batches_so_the_source_bound_applies_until_they_are_written() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-abcdefgh", "1": "-uvwxyz"})
        writer = Recorder(t)
        entered: list[str] = []
        left: list[str] = []
        most_waiting = 0

        def enter(batch: EventBatch) -> None:
            nonlocal most_waiting
            entered.append(batch.partition_id)
            waiting = entered.count(batch.partition_id) - left.count(batch.partition_id)
            most_waiting = max(most_waiting, waiting)

        source = reactivex.merge(
            *(rxhubs.partition_batches(hub, p, max_batch_size=1, max_inflight=2) for p in ("0", "1"))
        )
        results = t.start(
            source.pipe(
                ops.do_action(enter),
                sink(writer, max_events=3, max_interval=50, executor=slow(2)),
                ops.do_action(lambda b: left.append(b.partition_id)),
                symbols(),
            )
        )
        # at most max_inflight=2 batches of a partition wait in the sink, whatever the write time
        assert most_waiting == 2
        emitted = [v for _, v in timeline(results)]
        assert [v for v in emitted if v in "abcdefgh"] == list("abcdefgh")
        assert [v for v in emitted if v in "uvwxyz"] == list("uvwxyz")
        # the count (3) is reached though only 2 per partition may wait: micro-batches mix partitions
        assert all(len(w) == 3 for w in writer.writes[:-1])


def test_micro_batches_never_reach_a_count_above_the_backpressure_bound_so_time_seals_them() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-abcdef"})
        writer = Recorder(t)
        source = rxhubs.partition_batches(hub, "0", max_batch_size=1, max_inflight=2)
        t.start(source.pipe(sink(writer, max_events=10, max_interval=2)))
        assert writer.calls == [(3, ["a", "b"]), (5, ["c", "d"]), (7, ["e", "f"])]


# -- arguments ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_events": 0}, "max_events"),
        ({"max_events": True}, "max_events"),
        ({"max_interval": 0}, "max_interval"),
        ({"max_interval": "1"}, "max_interval"),
        ({"max_interval": float("inf")}, "max_interval"),
        ({"backoff": float("nan")}, "backoff"),
        ({"retries": -1}, "retries"),
        ({"backoff": -1.0}, "backoff"),
        ({"transform": "upper"}, "transform"),
        ({"convert": 3}, "convert"),
        ({"executor": 3}, "executor"),
    ],
)
def test_invalid_options_raise_configuration_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        rxhubs.spark.write(print, **options)


def test_the_writer_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="writer"):
        rxhubs.spark.write("out/")  # type: ignore[arg-type]


def test_items_that_are_not_batches_end_the_stream_with_configuration_error() -> None:
    with marble_test() as t:
        results = t.start(t.cold("-x").pipe(rxhubs.spark.write(print, convert=names)))
        assert timeline(results) == [(1, "#")]
        assert isinstance(results[0].value.exception, ConfigurationError)


def test_the_marble_diagram_of_the_docstring() -> None:
    with marble_test() as t:
        lookup = {k: make_batch("0", 2 * i, 2 * i + 1, body=k) for i, k in enumerate("abcdef")}
        writer = Recorder(t)
        results = t.start(t.cold("-a-b----c---d-e-f-|", lookup).pipe(sink(writer, max_events=4, max_interval=3)))
        assert [time for time, _ in writer.calls] == [3, 11, 14, 18]
        assert [(time, v if v == "|" else v.events[0].body.decode()) for time, v in timeline(results)] == [
            (3, "a"),
            (3, "b"),
            (11, "c"),
            (14, "d"),
            (14, "e"),
            (18, "f"),
            (18, "|"),
        ]


def test_batches_the_acks_bring_at_once_join_a_due_micro_batch_before_it_is_sealed() -> None:
    hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
    hub.send(["a0", "a1", "a2", "a3"], partition_id="0")
    hub.send(["b0", "b1", "b2", "b3"], partition_id="1")
    scheduler = TestScheduler()
    writes: list[tuple[float, list[str]]] = []
    source = reactivex.merge(*(rxhubs.partition_batches(hub, p, max_batch_size=1, max_inflight=2) for p in ("0", "1")))
    sink = rxhubs.spark.write(
        lambda data: writes.append((scheduler.clock, data)),
        convert=names,
        max_events=3,
        max_interval=1,
        executor=slow(5),
    )
    source.pipe(sink).subscribe(scheduler=scheduler)
    scheduler.advance_to(11.0)
    # b1 waits from 0 and is due at 1, while the first write runs; when it ends at 5 its acks let a2 and a3
    # in at once: they join b1 (sealed by count) instead of b1 leaving alone
    assert writes == [(0.0, ["a0", "a1", "b0"]), (5.0, ["b1", "a2", "a3"]), (10.0, ["b2", "b3"])]
