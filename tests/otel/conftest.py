"""The OpenTelemetry SDK's in-memory exporters behind ``rxhubs.otel.instrument``, one set per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rxhubs.otel


@dataclass
class Exported:
    """What the application's exporters received."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, in the order they ended (those named ``name``, when given)."""
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """The data points of ``metric`` at a collection now: (attributes, value), value ``(count, sum)`` for
        a histogram."""
        found: list[tuple[dict[str, Any], Any]] = []
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name != metric:
                        continue
                    for point in m.data.data_points:
                        value = (point.count, point.sum) if hasattr(point, "count") else point.value
                        found.append((dict(point.attributes or {}), value))
        return found

    def units(self) -> dict[str, str]:
        """Every metric's unit, by name."""
        data = self.reader.get_metrics_data()
        return {
            m.name: m.unit or ""
            for resource in (data.resource_metrics if data is not None else [])
            for scope in resource.scope_metrics
            for m in scope.metrics
        }


def by(points: list[tuple[dict[str, Any], Any]], key: str, where: dict[str, Any] | None = None) -> dict[Any, Any]:
    """``{attributes[key]: value}`` of the points whose attributes match ``where`` (summed if repeated)."""
    result: dict[Any, Any] = {}
    for attributes, value in points:
        if all(attributes.get(k) == v for k, v in (where or {}).items()):
            k = attributes.get(key)
            result[k] = result[k] + value if k in result else value
    return result


@pytest.fixture
def exported() -> Iterator[Exported]:
    """``rxhubs.otel.instrument`` with fresh SDK providers and in-memory exporters; uninstrumented after."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    rxhubs.otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Exported(exporter, reader, tracer_provider, meter_provider)
    rxhubs.otel.uninstrument()
    tracer_provider.shutdown()
    meter_provider.shutdown()
