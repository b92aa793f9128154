"""The OpenTelemetry implementation of the core's telemetry seam (:class:`rxhubs._telemetry.Telemetry`).

Spans are made with the application's tracer provider, each as the root of a new trace: a batch has many
producers (they are its links, not its parent), and a consumer runs for days, so nesting its spans under
whatever span was current when the pipeline started would make one endless trace. The process span is the
current span while the user's work runs, so spans the work makes are its children.

Nothing here may break a pipeline: a failure inside the instrumentation is logged on ``rxhubs.otel`` and the
work goes on unobserved. Exception messages and stack traces pass through rxhubs' secret redaction before
they reach a span.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Coroutine
from contextvars import Token
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from rxhubs._batch import EventBatch, OwnershipSession
from rxhubs._models import Checkpoint, PartitionContext
from rxhubs._rx import now
from rxhubs._telemetry import LossReason, Telemetry
from rxhubs.otel import _names as n
from rxhubs.otel._links import producer_links
from rxhubs.otel._metrics import Metrics
from rxhubs.transport._connection_string import redact

__all__ = ["OpenTelemetry"]

log = logging.getLogger("rxhubs.otel")

T = TypeVar("T")

#: An empty context: spans started in it have no parent (each is the root of its trace).
_ROOT = otel_context.Context()


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__


def _mark_failed(span: Span, error: BaseException) -> None:
    """Status ERROR, ``error.type`` and an ``exception`` event whose text is redacted."""
    message = redact(str(error))
    span.set_attribute(n.ERROR_TYPE, _error_type(error))
    span.set_status(Status(StatusCode.ERROR, f"{_error_type(error)}: {message}" if message else _error_type(error)))
    stack = redact("".join(traceback.format_exception(type(error), error, error.__traceback__)))
    span.add_event(
        "exception",
        {"exception.type": _error_type(error), "exception.message": message, "exception.stacktrace": stack},
    )


class OpenTelemetry(Telemetry):
    """Spans on ``tracer`` and measurements on ``metrics``; at most ``max_links`` links per batch span."""

    def __init__(self, tracer: Tracer, metrics: Metrics, max_links: int) -> None:
        self.tracer = tracer
        self.metrics = metrics
        self.max_links = max_links
        self._warned: set[str] = set()

    def _failed_inside(self, where: str, error: Exception) -> None:
        level = logging.DEBUG if where in self._warned else logging.WARNING
        self._warned.add(where)
        log.log(level, "OpenTelemetry instrumentation failed in %s (the pipeline goes on): %r", where, error)

    # -- batches -----------------------------------------------------------------------------------------------
    def received(self, batch: EventBatch) -> None:
        try:
            self.metrics.received(batch)
        except Exception as exc:
            self._failed_inside("received", exc)

    def processing(self, batch: EventBatch, attempt: int = 1) -> _Processing:
        """A context manager: the batch's ``process`` span, current inside; measures the work on exit."""
        return _Processing(self, batch, attempt)

    def process(self, batch: EventBatch, attempt: int, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return self._process(batch, attempt, work)

    async def _process(self, batch: EventBatch, attempt: int, work: Coroutine[Any, Any, T]) -> T:
        with self.processing(batch, attempt):
            return await work

    def start_process_span(self, batch: EventBatch, attempt: int) -> Span:
        context = batch.context
        attributes: dict[str, Any] = {
            **self.metrics.attributes(context, "process"),
            n.OPERATION_TYPE: "process",
            n.BATCH_COUNT: len(batch.events),
            n.ATTEMPT: attempt,
        }
        if batch.events:
            attributes[n.FIRST_SEQUENCE_NUMBER] = batch.events[0].sequence_number
            attributes[n.LAST_SEQUENCE_NUMBER] = batch.events[-1].sequence_number
        return self.tracer.start_span(
            f"process {context.eventhub_name}",
            context=_ROOT,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=producer_links(batch.events, self.max_links),
            record_exception=False,
            set_status_on_exception=False,
        )

    # -- checkpoints -------------------------------------------------------------------------------------------
    def checkpoint(
        self, checkpoint: Checkpoint, session: OwnershipSession | None, write: Coroutine[Any, Any, T]
    ) -> Coroutine[Any, Any, T]:
        return self._checkpoint(checkpoint, session, write)

    async def _checkpoint(
        self, checkpoint: Checkpoint, session: OwnershipSession | None, write: Coroutine[Any, Any, T]
    ) -> T:
        c = checkpoint
        context = PartitionContext(c.fully_qualified_namespace, c.eventhub_name, c.consumer_group, c.partition_id)
        span, token = self._start_checkpoint_span(c, context), None
        try:
            if span is not None:
                token = otel_context.attach(trace.set_span_in_context(span, _ROOT))
            result = await write
        except BaseException as error:
            self._checkpoint_done(context, span, token, error, counted=session is not None)
            raise
        self._checkpoint_done(context, span, token, None, counted=False)
        return result

    def _start_checkpoint_span(self, c: Checkpoint, context: PartitionContext) -> Span | None:
        try:
            attributes: dict[str, Any] = {
                **self.metrics.attributes(context, "checkpoint"),
                n.OPERATION_TYPE: "settle",
                n.CHECKPOINT_SEQUENCE_NUMBER: c.sequence_number,
            }
            if c.offset is not None:
                attributes[n.CHECKPOINT_OFFSET] = c.offset
            return self.tracer.start_span(
                f"checkpoint {c.eventhub_name}", context=_ROOT, attributes=attributes, record_exception=False
            )
        except Exception as exc:  # no span; the measurements are still taken
            self._failed_inside("checkpoint span", exc)
            return None

    def _checkpoint_done(
        self,
        context: PartitionContext,
        span: Span | None,
        token: Token[otel_context.Context] | None,
        error: BaseException | None,
        *,
        counted: bool,
    ) -> None:
        """End the span; count a failure (unless the consumer reports it: ``counted``) or note the write."""
        try:
            if token is not None:
                otel_context.detach(token)
            if span is not None:
                if error is not None:
                    _mark_failed(span, error)
                span.end()
            if error is None:
                self.metrics.checkpoint_written(context)
            elif not counted and isinstance(error, Exception):
                self.error(context, "checkpoint", error)
        except Exception as exc:
            self._failed_inside("checkpoint", exc)

    # -- ownership ---------------------------------------------------------------------------------------------
    def _ownership(
        self, operation: str, change: str, context: PartitionContext, owner_id: str, extra: dict[str, Any]
    ) -> None:
        """A span marking the change (``<operation> <hub>``), and its count."""
        try:
            attributes = {**self.metrics.attributes(context, operation), n.CLIENT_ID: owner_id, **extra}
            self.tracer.start_span(f"{operation} {context.eventhub_name}", context=_ROOT, attributes=attributes).end()
        except Exception as exc:
            self._failed_inside(f"{operation} span", exc)
        try:
            self.metrics.ownership(context, change, extra.get(n.OWNERSHIP_REASON))
        except Exception as exc:
            self._failed_inside(f"{operation} metrics", exc)

    def claimed(self, context: PartitionContext, owner_id: str, stolen: bool) -> None:
        self._ownership("claim", "claimed", context, owner_id, {n.OWNERSHIP_STOLEN: stolen})

    def released(self, context: PartitionContext, owner_id: str) -> None:
        self._ownership("release", "released", context, owner_id, {})

    def lost(self, context: PartitionContext, owner_id: str, reason: LossReason) -> None:
        self._ownership("lose", "lost", context, owner_id, {n.OWNERSHIP_REASON: reason})

    # -- errors ------------------------------------------------------------------------------------------------
    def error(self, context: PartitionContext, operation: str, error: BaseException) -> None:
        try:
            self.metrics.error(context, operation, error)
        except Exception as exc:
            self._failed_inside("error", exc)

    def stalled(self, context: PartitionContext, silent: float) -> None:
        try:
            self.metrics.stalled(context)
        except Exception as exc:
            self._failed_inside("stalled", exc)


class _Processing:
    """The ``process`` span of one batch, current while the work runs; duration and counts on exit.

    The duration is read on the pipeline's clock (:func:`rxhubs._rx.now`): the wall clock under asyncio, the
    scheduler's in virtual time, so a test sees the time its work took there. Span timestamps are real time.
    """

    __slots__ = ("_attempt", "_batch", "_owner", "_span", "_started", "_token")

    def __init__(self, owner: OpenTelemetry, batch: EventBatch, attempt: int) -> None:
        self._owner = owner
        self._batch = batch
        self._attempt = attempt
        self._span: Span | None = None
        self._token: Token[otel_context.Context] | None = None
        self._started = 0.0

    def __enter__(self) -> Span:
        self._started = now()
        try:
            span = self._span = self._owner.start_process_span(self._batch, self._attempt)
            self._token = otel_context.attach(trace.set_span_in_context(span, _ROOT))
        except Exception as exc:  # no span; the measurements are still taken
            self._owner._failed_inside("process span", exc)
            return trace.INVALID_SPAN
        return span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> None:
        seconds = max(0.0, now() - self._started)
        owner, batch, span = self._owner, self._batch, self._span
        if span is not None:
            try:
                if self._token is not None:
                    otel_context.detach(self._token)
                if error is not None:
                    _mark_failed(span, error)
                span.end()
            except Exception as exc:
                owner._failed_inside("process span", exc)
        try:
            if error is not None and batch._session is None and isinstance(error, Exception):
                owner.error(batch.context, "process", error)  # with balancing, the consumer reports it
            owner.metrics.processed_batch(batch, seconds, None if error is None else _error_type(error))
        except Exception as exc:
            owner._failed_inside("process metrics", exc)
