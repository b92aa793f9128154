"""The metrics: instruments on one meter, and the per-partition state the observable ones report.

Counters and the histogram are recorded as things happen (per batch, per change of ownership, per error);
lag, checkpoint age and owned partitions are observed when the application's metric reader collects.
State is kept per partition while this consumer owns it (or, without balancing, until uninstrumented), and
dropped when the partition is released or lost, so a moved partition stops being reported here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.otel import _names as n

__all__ = ["Metrics", "metrics_for"]

_Group = tuple[str, str, str]


class Metrics:
    """rxhubs' instruments on ``meter``, with ``clock()`` (epoch seconds) for the checkpoint age."""

    def __init__(self, meter: Meter, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.consumed = meter.create_counter(
            n.CONSUMED_MESSAGES, unit="{message}", description="Events delivered by partition sources."
        )
        self.duration = meter.create_histogram(
            n.PROCESS_DURATION,
            unit="s",
            description="Duration of the work on one batch (hops.process, EventProcessor.process_events).",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.processed = meter.create_counter(
            n.EVENTS_PROCESSED, unit="{event}", description="Events whose batch's work completed."
        )
        self.changes = meter.create_counter(
            n.OWNERSHIP_CHANGES, unit="{change}", description="Partitions claimed, released or lost (rebalances)."
        )
        self.errors = meter.create_counter(n.ERRORS, unit="{error}", description="Errors, by operation.")
        self.stalls = meter.create_counter(
            n.RECEIVE_STALLS,
            unit="{stall}",
            description="Receive connections found silent past their idle timeout (dead paths), then reopened.",
        )
        meter.create_observable_gauge(
            n.LAG,
            [self._observe_lag],
            unit="{event}",
            description="Events enqueued after the last processed one: last enqueued minus processed sequence number.",
        )
        meter.create_observable_gauge(
            n.CHECKPOINT_AGE, [self._observe_age], unit="s", description="Time since the last checkpoint written."
        )
        meter.create_observable_up_down_counter(
            n.OWNED_PARTITIONS, [self._observe_owned], unit="{partition}", description="Partitions owned."
        )
        self._attributes: dict[tuple[PartitionContext, str | None], Mapping[str, Any]] = {}
        self._done: dict[PartitionContext, int] = {}
        self._lag: dict[PartitionContext, int] = {}
        self._written: dict[PartitionContext, float] = {}
        self._owned: dict[_Group, set[str]] = {}

    def reset(self, clock: Callable[[], float]) -> None:
        """Forget every partition (uninstrumented, or instrumented again with another clock)."""
        self.clock = clock
        self._done.clear()
        self._lag.clear()
        self._written.clear()
        self._owned.clear()

    def attributes(self, context: PartitionContext, operation: str | None = None) -> Mapping[str, Any]:
        """The attributes of ``context`` (cached: one dict per partition and operation)."""
        key = (context, operation)
        found = self._attributes.get(key)
        if found is None:
            if len(self._attributes) > 10_000:  # contexts come and go with ownership; never grow for ever
                self._attributes.clear()
            found = self._attributes[key] = n.base_attributes(context, operation)
        return found

    # -- recorded ----------------------------------------------------------------------------------------------
    def received(self, batch: EventBatch) -> None:
        if batch.events:
            self.consumed.add(len(batch.events), self.attributes(batch.context, "receive"))

    def processed_batch(self, batch: EventBatch, seconds: float, error_type: str | None) -> None:
        attributes = self.attributes(batch.context, "process")
        if error_type is not None:
            self.duration.record(seconds, {**attributes, n.ERROR_TYPE: error_type})
            return
        self.duration.record(seconds, attributes)
        if batch.events:
            self.processed.add(len(batch.events), attributes)
        context = batch.context
        origin = batch._origin
        last = origin.last if origin is not None and origin.last is not None else batch.last_event
        done = self._done.get(context)
        if last is not None and (done is None or last.sequence_number > done):
            done = self._done[context] = last.sequence_number
        enqueued = batch.last_enqueued
        if enqueued is not None and done is not None:
            self._lag[context] = max(0, enqueued.sequence_number - done)

    def checkpoint_written(self, context: PartitionContext) -> None:
        self._written[context] = self.clock()

    def ownership(self, context: PartitionContext, change: str, reason: str | None = None) -> None:
        attributes = {**self.attributes(context), n.OWNERSHIP_CHANGE: change}
        if reason is not None:
            attributes[n.OWNERSHIP_REASON] = reason
        self.changes.add(1, attributes)
        group = (context.fully_qualified_namespace, context.eventhub_name, context.consumer_group)
        owned = self._owned.setdefault(group, set())
        if change == "claimed":
            owned.add(context.partition_id)
        else:
            owned.discard(context.partition_id)
        self._done.pop(context, None)  # a new period of ownership starts afresh; a moved partition is not ours
        self._lag.pop(context, None)
        self._written.pop(context, None)

    def error(self, context: PartitionContext, operation: str, error: BaseException) -> None:
        self.errors.add(1, {**self.attributes(context, operation), n.ERROR_TYPE: type(error).__qualname__})

    def stalled(self, context: PartitionContext) -> None:
        self.stalls.add(1, self.attributes(context, "receive"))

    # -- observed ----------------------------------------------------------------------------------------------
    def _observe_lag(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(lag, self.attributes(context)) for context, lag in tuple(self._lag.items())]

    def _observe_age(self, _: CallbackOptions) -> Iterable[Observation]:
        now = self.clock()
        return [
            Observation(max(0.0, now - written), self.attributes(context))
            for context, written in tuple(self._written.items())
        ]

    def _observe_owned(self, _: CallbackOptions) -> Iterable[Observation]:
        observations = []
        for (namespace, hub, group), owned in tuple(self._owned.items()):
            context = PartitionContext(namespace, hub, group, "")
            observations.append(Observation(len(owned), self.attributes(context)))
        return observations


# One Metrics per meter provider: instruments are created once per meter (a second creation returns the first
# instrument, whose callbacks would still point at an old object), so instrumenting again reuses them.
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, Metrics] = weakref.WeakKeyDictionary()


def metrics_for(provider: MeterProvider, meter: Callable[[], Meter], clock: Callable[[], float]) -> Metrics:
    """The :class:`Metrics` of ``provider``: made with ``meter()`` the first time, reset afterwards."""
    try:
        found = _BY_PROVIDER.get(provider)
    except TypeError:  # a provider that cannot be weakly referenced: no reuse
        return Metrics(meter(), clock)
    if found is not None:
        found.reset(clock)
        return found
    made = _BY_PROVIDER[provider] = Metrics(meter(), clock)
    return made
