"""OpenTelemetry: a span per processed batch, linked to the producer's span, and rxhubs' metrics, on the console.

Needs the otel extra (pip install 'rxhubs[otel]'). Runs in process: in-memory hub and store, real time.
    python examples/opentelemetry_console.py
"""

from __future__ import annotations

import asyncio

from opentelemetry import propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricsData, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import rxhubs
import rxhubs.otel
from rxhubs import operators as hops


# The console exporters print JSON by default; one line per span and per data point is enough here.
def one_line(span: ReadableSpan) -> str:
    attributes = dict(span.attributes or {})
    partition = attributes.get("messaging.destination.partition.id", "")
    events = attributes.get("messaging.batch.message_count", "-")
    return f"span {span.name!r} partition={partition} events={events} links={len(span.links)} root={not span.parent}\n"


def data_points(data: MetricsData) -> str:
    lines = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    shown = f"count={point.count} sum={point.sum}" if value is None else value  # type: ignore[union-attr]
                    attributes = point.attributes or {}
                    partition = attributes.get("messaging.destination.partition.id", "*")
                    change = attributes.get("rxhubs.ownership.change")
                    change = f" ({change})" if change else ""
                    lines.append(f"metric {metric.name} [{metric.unit}] partition={partition}{change}: {shown}\n")
    return "".join(lines)


# 1. The application sets up OpenTelemetry (here: console exporters) and turns rxhubs' instrumentation on.
resource = Resource.create({"service.name": "orders-consumer"})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
trace.set_tracer_provider(tracer_provider)
console = ConsoleMetricExporter(formatter=data_points)
metric_reader = PeriodicExportingMetricReader(console, export_interval_millis=60_000)  # and on flush, at exit
meter_provider = MeterProvider(resource=resource, metric_readers=[metric_reader])
rxhubs.otel.instrument(meter_provider=meter_provider)  # spans go to the global tracer provider set above

tracer = trace.get_tracer("orders-app")


async def main() -> int:
    hub, store = rxhubs.testing.InMemoryEventHub(2, eventhub_name="orders"), rxhubs.stores.InMemoryCheckpointStore()

    # 2. A producer puts its trace context into the events' properties (azure-eventhub does it by itself
    #    when its tracing is on; see docs/observability.md).
    with tracer.start_as_current_span("publish orders"):
        context: dict[str, str] = {}
        propagate.inject(context)  # {"traceparent": "00-<trace id>-<span id>-01"}
        hub.send([b'{"order": 1}', b'{"order": 2}'], partition_id="0", properties=context)
        hub.send([b'{"order": 3}'], partition_id="1", properties=context)

    processed, all_done = 0, asyncio.Event()

    async def handle(batch: rxhubs.EventBatch) -> None:  # runs inside the batch's "process orders" span
        nonlocal processed
        with tracer.start_as_current_span("save orders"):  # a child of the batch's span
            processed += len(batch)
        if processed == 3:
            all_done.set()

    # 3. The pipeline is unchanged: hops.process makes the span per batch, hops.checkpoint its own.
    pipeline = rxhubs.consume(hub, "$Default", store, max_wait=0.05).pipe(
        hops.process(handle), hops.checkpoint(store)
    )
    stop = rxhubs.Shutdown()
    running = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await asyncio.wait_for(all_done.wait(), 30)
    await asyncio.sleep(0.2)  # the checkpoints are written
    print("-- metrics while running --")
    meter_provider.force_flush()
    stop.request()
    await running
    return processed


if __name__ == "__main__":
    count = asyncio.run(main())
    print("-- metrics after the stop (partitions released) --")
    meter_provider.shutdown()  # exports the metrics one last time
    tracer_provider.shutdown()
    rxhubs.otel.uninstrument()
    raise SystemExit(0 if count == 3 else 1)
