"""OpenTelemetry for rxhubs pipelines: traces and metrics (``pip install 'rxhubs[otel]'``).

:func:`instrument` turns it on for the whole process, like other OpenTelemetry instrumentations; it uses the
global tracer and meter providers unless given others. Then:

* every batch processed by ``hops.process`` or ``EventProcessor`` gets a ``process <hub>`` span (kind
  CONSUMER, the messaging semantic conventions' attributes), linked to the producers' trace contexts found in
  its events (``traceparent`` / ``Diagnostic-Id``), and current while the work runs; :func:`traced` gives plain
  Rx pipelines the same span;
* checkpoint writes get a ``checkpoint <hub>`` span, ownership changes ``claim`` / ``release`` / ``lose``
  spans;
* metrics count events received and processed, time the work, and report lag, checkpoint age, owned
  partitions, ownership changes and errors by operation.

Only this package imports ``opentelemetry``; ``import rxhubs`` never does, and without :func:`instrument` the
core's hooks do nothing. See ``docs/observability.md`` for every name, unit and attribute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from opentelemetry import metrics, trace

from rxhubs import _telemetry
from rxhubs.errors import ConfigurationError
from rxhubs.otel._instrumentation import OpenTelemetry
from rxhubs.otel._metrics import metrics_for
from rxhubs.otel._operator import traced

__all__ = ["instrument", "is_instrumented", "traced", "uninstrument"]

_SCOPE = "rxhubs"
_lock = threading.Lock()


def _version() -> str:
    import rxhubs

    return rxhubs.__version__


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    max_links: int = 128,
    clock: Callable[[], float] | None = None,
) -> None:
    """Send rxhubs' spans and metrics to OpenTelemetry, for every pipeline in this process.

    Call it once at start-up, after the application configured its providers and exporters (or pass them).
    Calling it again replaces the earlier set-up; :func:`uninstrument` turns it off.

    Args:
        tracer_provider: Where spans go (default: the global one, ``opentelemetry.trace``).
        meter_provider: Where metrics go (default: the global one, ``opentelemetry.metrics``).
        max_links: Most links to producers' contexts per batch span (distinct contexts, in event order).
        clock: Seconds since the epoch, for the checkpoint age (default ``time.time``; a test in virtual
            time passes the scheduler's clock).

    Raises:
        ConfigurationError: For an invalid ``max_links`` or ``clock``.

    Example:
        >>> import rxhubs, rxhubs.otel
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        >>> spans, provider = InMemorySpanExporter(), TracerProvider()
        >>> provider.add_span_processor(SimpleSpanProcessor(spans))
        >>> rxhubs.otel.instrument(tracer_provider=provider)
        >>> hub, store = rxhubs.testing.InMemoryEventHub(partition_count=1), rxhubs.stores.InMemoryCheckpointStore()
        >>> _ = hub.send([b"a", b"b"], partition_id="0")
        >>> scheduler = TestScheduler()
        >>> _ = rxhubs.consume(hub, "$Default", store).pipe(
        ...     hops.process(lambda batch: None), hops.checkpoint(store)).subscribe(scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> rxhubs.otel.uninstrument()
        >>> [span.name for span in spans.get_finished_spans()]
        ['claim telemetry', 'process telemetry', 'checkpoint telemetry']
    """
    if isinstance(max_links, bool) or not isinstance(max_links, int) or max_links < 0:
        raise ConfigurationError(f"max_links must be an int >= 0, got {max_links!r}")
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be callable (seconds since the epoch), got {type(clock).__name__}")
    tracers = tracer_provider or trace.get_tracer_provider()
    meters = meter_provider or metrics.get_meter_provider()
    version = _version()
    with _lock:
        tracer = tracers.get_tracer(_SCOPE, version)
        measured = metrics_for(meters, lambda: meters.get_meter(_SCOPE, version), clock or time.time)
        previous = _telemetry.install(OpenTelemetry(tracer, measured, max_links))
        if isinstance(previous, OpenTelemetry) and previous.metrics is not measured:
            previous.metrics.reset(previous.metrics.clock)  # the old provider's gauges report nothing more


def uninstrument() -> None:
    """Stop sending spans and metrics; rxhubs' hooks do nothing again (pipelines keep running).

    Example:
        >>> import rxhubs.otel
        >>> rxhubs.otel.instrument()
        >>> rxhubs.otel.uninstrument()
        >>> rxhubs.otel.is_instrumented()
        False
    """
    with _lock:
        previous = _telemetry.install(None)
        if isinstance(previous, OpenTelemetry):
            previous.metrics.reset(previous.metrics.clock)


def is_instrumented() -> bool:
    """True between :func:`instrument` and :func:`uninstrument`.

    Example:
        >>> import rxhubs.otel
        >>> rxhubs.otel.is_instrumented()
        False
    """
    return isinstance(_telemetry.hooks, OpenTelemetry)
