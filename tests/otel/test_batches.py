"""rxhubs.otel on real pipelines over the in-memory hub and store, in virtual time: the span per processed
batch, its links to the producers, the spans of the user's work under it, and the metrics with their values."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
import rxhubs.otel
from rxhubs import EventBatch
from rxhubs import operators as hops
from rxhubs._telemetry import Telemetry
from rxhubs.errors import ConfigurationError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, sleep
from tests.otel.conftest import Exported, by

#: The work-duration histogram; in these tests its values are virtual seconds (TestScheduler), not wall time.
WORK_TIME = "messaging.process.duration"

GROUP = "$Default"
PID = "messaging.destination.partition.id"
ENQUEUED = "messaging.eventhubs.message.enqueued_time"

# Producers' contexts: (trace id, span id) as W3C Trace Context writes them
A = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
B = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
C = ("5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7")


def traceparent(ids: tuple[str, str]) -> str:
    return f"00-{ids[0]}-{ids[1]}-01"


def as_ints(ids: tuple[str, str]) -> tuple[int, int]:
    return int(ids[0], 16), int(ids[1], 16)


def base(partition_id: str) -> dict[str, Any]:
    return {
        "messaging.system": "eventhubs",
        "messaging.destination.name": "telemetry",
        "messaging.consumer.group.name": GROUP,
        "server.address": "inmemory.servicebus.local",
        PID: partition_id,
    }


def test_a_process_span_per_batch_links_each_producer_once_and_parents_the_work(exported: Exported) -> None:
    hub, store, scheduler = InMemoryEventHub(partition_count=2), InMemoryCheckpointStore(), TestScheduler()
    first = hub.send([b"1", b"2", b"3"], partition_id="0", properties={"traceparent": traceparent(A)})
    second = hub.send([b"4", b"5"], partition_id="0", properties={"Diagnostic-Id": traceparent(B)})  # older SDKs
    hub.send([b"6"], partition_id="0")  # no context
    hub.send([b"7"], partition_id="0", properties={"traceparent": "not a trace context"})
    third = hub.send([b"8"], partition_id="1", properties={"traceparent": traceparent(C), "tracestate": "congo=t61"})
    tracer = exported.tracer_provider.get_tracer("app")

    async def work(batch: EventBatch) -> None:
        with tracer.start_as_current_span(f"enrich {batch.partition_id}"):
            await sleep(1.0)

    rxhubs.consume(hub, GROUP, store, owner_id="me").pipe(hops.process(work), hops.checkpoint(store)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(5.0)

    process = {s.attributes[PID]: s for s in exported.spans("process telemetry")}  # type: ignore[index]
    assert set(process) == {"0", "1"} and len(exported.spans("process telemetry")) == 2
    zero, one = process["0"], process["1"]
    assert zero.kind is SpanKind.CONSUMER and zero.parent is None  # a batch has many parents: they are links
    assert dict(zero.attributes or {}) == {
        **base("0"),
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.batch.message_count": 7,
        "rxhubs.attempt": 1,
        "rxhubs.batch.first_sequence_number": 0,
        "rxhubs.batch.last_sequence_number": 6,
    }
    assert zero.status.status_code is StatusCode.UNSET
    # three events share A: one link; B read from Diagnostic-Id; no link for the event without or with a bad context
    assert [(link.context.trace_id, link.context.span_id) for link in zero.links] == [as_ints(A), as_ints(B)]
    assert [dict(link.attributes or {}) for link in zero.links] == [
        {ENQUEUED: int(first[0].enqueued_time.timestamp())},
        {ENQUEUED: int(second[0].enqueued_time.timestamp())},
    ]
    assert [(link.context.trace_id, link.context.span_id) for link in one.links] == [as_ints(C)]
    assert one.links[0].context.trace_state.to_header() == "congo=t61"
    assert dict(one.links[0].attributes or {}) == {ENQUEUED: int(third[0].enqueued_time.timestamp())}
    # the user's spans are children of the batch's span
    for pid, span in process.items():
        [enrich] = exported.spans(f"enrich {pid}")
        assert enrich.parent is not None and enrich.parent.span_id == span.context.span_id
        assert enrich.context.trace_id == span.context.trace_id
    # the checkpoint written after the work, one span each
    checkpoints = {s.attributes[PID]: s for s in exported.spans("checkpoint telemetry")}  # type: ignore[index]
    assert dict(checkpoints["0"].attributes or {}) == {
        **base("0"),
        "messaging.operation.name": "checkpoint",
        "messaging.operation.type": "settle",
        "rxhubs.checkpoint.sequence_number": 6,
        "rxhubs.checkpoint.offset": hub.events("0")[6].offset,
    }
    assert checkpoints["0"].kind is SpanKind.INTERNAL and checkpoints["0"].parent is None
    assert checkpoints["1"].attributes["rxhubs.checkpoint.sequence_number"] == 0  # type: ignore[index]


@pytest.mark.parametrize("max_links", [0, 1])
def test_max_links_caps_the_links_of_a_batch(exported: Exported, max_links: int) -> None:
    rxhubs.otel.instrument(exported.tracer_provider, exported.meter_provider, max_links=max_links)
    hub, scheduler = InMemoryEventHub(partition_count=1), TestScheduler()
    hub.send([b"1"], partition_id="0", properties={"traceparent": traceparent(A)})
    hub.send([b"2"], partition_id="0", properties={"traceparent": traceparent(B)})
    rxhubs.partition_batches(hub, "0").pipe(hops.process(lambda batch: None)).subscribe(scheduler=scheduler)
    scheduler.advance_to(1.0)
    [span] = exported.spans("process telemetry")
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [as_ints(A)][:max_links]


def test_metrics_count_events_time_the_work_and_report_lag_checkpoint_age_and_owned_partitions(
    exported: Exported,
) -> None:
    scheduler = TestScheduler()
    rxhubs.otel.instrument(exported.tracer_provider, exported.meter_provider, clock=lambda: scheduler.now.timestamp())
    hub, store = InMemoryEventHub(partition_count=2), InMemoryCheckpointStore()
    hub.send([b"x"] * 5, partition_id="0")
    hub.send([b"y"] * 3, partition_id="1")

    async def work(batch: EventBatch) -> None:
        await sleep(1.0)  # one virtual second per batch

    subscription = (
        rxhubs.consume(hub, GROUP, store, owner_id="me", max_batch_size=2)
        .pipe(hops.process(work), hops.checkpoint(store, max_interval=5.0))
        .subscribe(scheduler=scheduler)
    )
    scheduler.advance_to(1.5)  # every batch read; the first of each partition done and checkpointed at 1.0
    assert by(exported.points("messaging.client.consumed.messages"), PID) == {"0": 5, "1": 3}
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 2, "1": 2}
    assert by(exported.points(WORK_TIME), PID) == {"0": (1, 1.0), "1": (1, 1.0)}
    assert by(exported.points("rxhubs.partition.lag"), PID) == {"0": 4 - 1, "1": 2 - 1}
    assert by(exported.points("rxhubs.checkpoint.age"), PID) == {"0": 0.5, "1": 0.5}
    [(owned_attributes, owned)] = exported.points("rxhubs.partitions.owned")
    assert owned == 2 and PID not in owned_attributes
    assert owned_attributes["messaging.destination.name"] == "telemetry"

    scheduler.advance_to(10.0)  # all done; the last checkpoints were written at 6.0 (5 s after the first)
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 5, "1": 3}
    assert by(exported.points(WORK_TIME), PID) == {"0": (3, 3.0), "1": (2, 2.0)}
    assert by(exported.points("rxhubs.partition.lag"), PID) == {"0": 0, "1": 0}
    assert by(exported.points("rxhubs.checkpoint.age"), PID) == {"0": 4.0, "1": 4.0}
    assert by(exported.points("rxhubs.ownership.changes"), PID, {"rxhubs.ownership.change": "claimed"}) == {
        "0": 1,
        "1": 1,
    }
    assert exported.units() == {
        "messaging.client.consumed.messages": "{message}",
        "rxhubs.events.processed": "{event}",
        "messaging.process.duration": "s",
        "rxhubs.partition.lag": "{event}",
        "rxhubs.checkpoint.age": "s",
        "rxhubs.partitions.owned": "{partition}",
        "rxhubs.ownership.changes": "{change}",
    }

    subscription.dispose()  # stops balancing: both partitions are released
    scheduler.advance_to(20.0)
    assert by(exported.points("rxhubs.ownership.changes"), PID, {"rxhubs.ownership.change": "released"}) == {
        "0": 1,
        "1": 1,
    }
    assert [value for _, value in exported.points("rxhubs.partitions.owned")] == [0]
    assert exported.points("rxhubs.partition.lag") == []  # released partitions are not reported any more
    assert exported.points("rxhubs.checkpoint.age") == []


def test_traced_gives_a_plain_rx_pipeline_a_span_per_batch_around_its_operators(exported: Exported) -> None:
    hub, scheduler = InMemoryEventHub(partition_count=1), TestScheduler()
    hub.send([b"1", b"2"], partition_id="0", properties={"traceparent": traceparent(A)})
    tracer = exported.tracer_provider.get_tracer("app")
    totals: list[int] = []

    def total(batch: EventBatch) -> int:
        with tracer.start_as_current_span("sum"):
            return sum(int(event.body) for event in batch)

    rxhubs.partition_batches(hub, "0").pipe(rxhubs.otel.traced(), ops.map(total)).subscribe(
        totals.append, scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert totals == [3]
    [span] = exported.spans("process telemetry")
    [inner] = exported.spans("sum")
    assert inner.parent is not None and inner.parent.span_id == span.context.span_id
    assert span.attributes["messaging.batch.message_count"] == 2  # type: ignore[index]
    assert span.attributes["messaging.consumer.group.name"] == GROUP  # type: ignore[index]
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [as_ints(A)]
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 2}


def test_without_instrument_traced_passes_batches_on_and_nothing_is_recorded(exported: Exported) -> None:
    rxhubs.otel.uninstrument()
    assert not rxhubs.otel.is_instrumented()
    assert type(rxhubs._telemetry.hooks) is Telemetry  # the core's no-op
    hub, scheduler = InMemoryEventHub(partition_count=1), TestScheduler()
    hub.send([b"1", b"2"], partition_id="0")
    seen: list[int] = []
    rxhubs.partition_batches(hub, "0").pipe(rxhubs.otel.traced(), hops.process(lambda batch: None)).subscribe(
        lambda batch: seen.append(len(batch)), scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert seen == [2]
    assert exported.spans() == []
    assert exported.points("messaging.client.consumed.messages") == []


def test_instrumenting_again_with_the_same_providers_keeps_counting_with_the_same_instruments(
    exported: Exported,
) -> None:
    for _ in range(2):
        rxhubs.otel.instrument(exported.tracer_provider, exported.meter_provider)
        hub, scheduler = InMemoryEventHub(partition_count=1), TestScheduler()
        hub.send([b"1", b"2", b"3"], partition_id="0")
        rxhubs.partition_batches(hub, "0").pipe(hops.process(lambda batch: None)).subscribe(scheduler=scheduler)
        scheduler.advance_to(1.0)
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 6}
    assert len(exported.spans("process telemetry")) == 2


def test_instrument_refuses_bad_options() -> None:
    with pytest.raises(ConfigurationError, match="max_links"):
        rxhubs.otel.instrument(max_links=-1)
    with pytest.raises(ConfigurationError, match="clock"):
        rxhubs.otel.instrument(clock=3.0)  # type: ignore[arg-type]
    assert not rxhubs.otel.is_instrumented()
