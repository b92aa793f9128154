"""``rxhubs.otel.traced()``: a ``process`` span per batch for pipelines whose work is plain Rx operators."""

from __future__ import annotations

from collections.abc import Callable

import reactivex
from reactivex import Observable, abc

from rxhubs import _telemetry
from rxhubs._batch import EventBatch
from rxhubs.otel._instrumentation import OpenTelemetry

__all__ = ["traced"]


def traced() -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """A ``process`` span per batch around the synchronous work downstream of it; batches pass unchanged.

    ``hops.process`` and ``EventProcessor`` make a span per batch by themselves. A pipeline whose work is
    plain Rx operators (``ops.map``, ``ops.filter``, a synchronous sink) has no such place: put ``traced()``
    right after the source, and each batch's span is current while the operators after it handle that batch
    (an Rx ``on_next`` runs them in turn), so their own spans nest under it. Work that finishes later, off the
    ``on_next`` call (a Spark write, ``hops.process`` itself), is not inside the span: use ``hops.process`` for
    it. The span and the process metrics (duration, events processed, lag) are those of ``hops.process``; an
    error raised downstream marks the span failed and goes on as before. Without :func:`instrument` it does
    nothing but pass batches on.

    Marble diagram::

        batches:  -a---b--|
        traced(): -a---b--|      (unchanged; a span from each on_next to its return)

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]``.

    Example:
        >>> import rxhubs, rxhubs.otel
        >>> from reactivex import operators as ops
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"1", b"2"], partition_id="0")
        >>> pipeline = rxhubs.partition_batches(hub, "0").pipe(
        ...     rxhubs.otel.traced(),            # spans cover the map below
        ...     ops.map(lambda batch: [int(e.body) for e in batch]),
        ... )
    """

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(
            observer: abc.ObserverBase[EventBatch], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            def on_next(batch: EventBatch) -> None:
                hooks = _telemetry.hooks
                if not isinstance(hooks, OpenTelemetry):
                    observer.on_next(batch)
                    return
                with hooks.processing(batch):
                    observer.on_next(batch)

            return source.subscribe(on_next, observer.on_error, observer.on_completed, scheduler=scheduler)

        return reactivex.create(subscribe)

    return operator
