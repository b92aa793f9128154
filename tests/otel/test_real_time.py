"""rxhubs.otel under asyncio: EventProcessor's process_events inside its batch span, and the unmodified
azure-eventhub producer, with its own tracing on, sending through the emulator to an rxhubs consumer whose
batch spans link to the producer's message spans."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest
from azure.core.settings import settings
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import rxhubs
import rxhubs.otel
from rxhubs import Event, EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.emulator import BackgroundEmulator
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.otel.conftest import Exported, by

PID = "messaging.destination.partition.id"


async def until(condition: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


class Traced(rxhubs.PartitionProcessor):
    """Makes a span of its own for each batch and counts the events."""

    events: ClassVar[int] = 0
    tracer: ClassVar[trace.Tracer]

    async def process_events(self, events: Sequence[Event], context: PartitionContext) -> None:
        with Traced.tracer.start_as_current_span("store rows"):
            await asyncio.sleep(0.001)
        Traced.events += len(events)
        if events:
            await self.update_checkpoint(events[-1])


async def test_event_processor_process_events_runs_inside_its_batch_span(exported: Exported) -> None:
    Traced.events, Traced.tracer = 0, exported.tracer_provider.get_tracer("app")
    hub, store = InMemoryEventHub(partition_count=2), InMemoryCheckpointStore()
    hub.send([b"a", b"b", b"c"], partition_id="0")
    hub.send([b"d"], partition_id="1")
    async with rxhubs.EventProcessor(
        hub, "$Default", Traced, store, owner_id="p", load_balancing_interval=0.1, ownership_expiration=0.6
    ):
        await until(lambda: Traced.events == 4)
    spans = {s.context.span_id: s for s in exported.spans("process telemetry")}
    inner = exported.spans("store rows")
    assert len(inner) == len(spans) >= 2
    assert {s.parent.span_id for s in inner if s.parent is not None} == set(spans)
    assert sum(s.attributes["messaging.batch.message_count"] for s in spans.values()) == 4  # type: ignore[misc]
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 3, "1": 1}
    assert {s.attributes[PID] for s in exported.spans("release telemetry")} == {"0", "1"}  # stop() released
    assert {s.attributes["messaging.client.id"] for s in exported.spans("claim telemetry")} == {"p"}


@pytest.fixture(scope="module")
def global_spans() -> InMemorySpanExporter:
    """azure-core's OpenTelemetry plugin traces through the global tracer provider: set one, once."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def azure_tracing(global_spans: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """azure-eventhub traces with OpenTelemetry (azure-core-tracing-opentelemetry); rxhubs too, globally."""
    global_spans.clear()
    settings.tracing_implementation = "opentelemetry"
    rxhubs.otel.instrument()  # the global providers
    yield global_spans
    rxhubs.otel.uninstrument()
    settings.tracing_implementation = None


async def test_batch_spans_link_the_azure_sdk_producers_message_spans(
    azure_tracing: InMemorySpanExporter, eventhubs_emulator: BackgroundEmulator
) -> None:
    connection_string = eventhubs_emulator.connection_string("telemetry")
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    start = {pid: (await hub.get_partition_properties(pid)).last_enqueued_sequence_number for pid in ("0", "1")}
    async with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for pid, count in (("0", 4), ("1", 2)):
            batch = await producer.create_batch(partition_id=pid)
            for n in range(count):
                batch.add(EventData(f"{pid}:{n}"))
            await producer.send_batch(batch)
    produced = [s for s in azure_tracing.get_finished_spans() if s.name == "EventHubs.message"]
    assert len(produced) == 6 and all(s.kind is SpanKind.PRODUCER for s in produced)

    received: list[EventBatch] = []
    stop = rxhubs.Shutdown()

    async def work(batch: EventBatch) -> None:
        received.append(batch)
        if sum(len(b) for b in received) >= 6:
            stop.request()

    store = InMemoryCheckpointStore()
    after_earlier_tests = {pid: rxhubs.Position.from_sequence_number(seq) for pid, seq in start.items()}
    pipeline = rxhubs.consume(hub, "rxhubs", store, start=after_earlier_tests, max_wait=0.1).pipe(
        hops.process(work), hops.checkpoint(store)
    )
    try:
        await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), 60)
    finally:
        await hub.close()

    # the SDK stamped each event with its message span's context, as traceparent and Diagnostic-Id
    events = [event for batch in received for event in batch]
    assert len(events) == 6
    assert all(e.properties["traceparent"] == e.properties["Diagnostic-Id"] for e in events)
    spans = [s for s in azure_tracing.get_finished_spans() if s.name == "process telemetry"]
    assert sum(s.attributes["messaging.batch.message_count"] for s in spans) == 6  # type: ignore[misc]
    linked = [(link.context.trace_id, link.context.span_id) for s in spans for link in s.links]
    assert sorted(linked) == sorted((s.context.trace_id, s.context.span_id) for s in produced)
    for span in spans:  # each batch links exactly its own events' producers, in order
        attributes = dict(span.attributes or {})
        first = (attributes[PID], attributes["rxhubs.batch.first_sequence_number"])
        [batch] = [b for b in received if (b.partition_id, b.first_sequence_number) == first]
        assert [format(link.context.span_id, "016x") for link in span.links] == [
            str(e.properties["traceparent"]).split("-")[2] for e in batch
        ]
        assert span.attributes["server.address"] == "127.0.0.1"  # type: ignore[index]
        assert span.attributes["messaging.consumer.group.name"] == "rxhubs"  # type: ignore[index]


async def test_a_plain_function_in_its_worker_thread_runs_inside_the_batch_span(exported: Exported) -> None:
    tracer = exported.tracer_provider.get_tracer("app")
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"a", b"b"], partition_id="0")
    threads: list[str] = []

    def blocking_work(batch: EventBatch) -> None:  # hops.process runs it in a worker thread
        threads.append(threading.current_thread().name)
        with tracer.start_as_current_span("blocking call"):
            pass

    stop = rxhubs.Shutdown()
    pipeline = rxhubs.partition_batches(hub, "0", max_wait=0.05).pipe(
        hops.process(blocking_work), hops.process(lambda batch: stop.request(), blocking=False)
    )
    await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), 30)
    assert threads and threads[0] != threading.main_thread().name
    [inner] = exported.spans("blocking call")
    work_span, stop_span = exported.spans("process telemetry")  # one per hops.process, in the order they ended
    assert inner.parent is not None and inner.parent.span_id == work_span.context.span_id
    assert inner.context.trace_id == work_span.context.trace_id != stop_span.context.trace_id
