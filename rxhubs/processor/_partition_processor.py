"""``PartitionProcessor``: the per-partition callbacks of the seeds' processor form."""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Sequence
from typing import Any

from rxhubs._models import CloseReason, Event, PartitionContext

__all__ = ["PartitionProcessor"]


class _Done:
    """An awaitable that is already done (``update_checkpoint`` works with and without ``await``)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class PartitionProcessor:
    """What an :class:`~rxhubs.EventProcessor` does with one partition while it owns it; subclass it.

    One instance per period of ownership of one partition: made when the partition is claimed, closed when it
    is handed over, lost or released at a stop. Every method may be a plain function or ``async``:

    * :meth:`initialize` before the first batch is read;
    * :meth:`process_events` for each batch, one at a time, in order (a sequence of :class:`~rxhubs.Event`;
      empty only with ``emit_empty=True``). Record progress with ``await self.update_checkpoint(event)``:
      checkpoints are written coalesced, at most one per ``checkpoint_interval``, never for a partition this
      processor no longer owns, and flushed before the partition is released;
    * :meth:`process_error` for every error of this partition (a failed :meth:`process_events` and its
      retries, a receive, a checkpoint write), with the operation in ``context.operation``;
    * :meth:`close` once the partition's batches finished, before it is released.

    A :meth:`process_events` that keeps failing (after the processor's ``retry``) stops the partition: it is
    released and read again from its last checkpoint after a backoff, unless an ``on_poison`` handler was
    given to the :class:`~rxhubs.EventProcessor`.

    Example:
        >>> import rxhubs
        >>> class Printer(rxhubs.PartitionProcessor):
        ...     async def process_events(self, events, context):
        ...         for event in events:
        ...             print(context.partition_id, event.body_as_str())
        ...         if events:
        ...             await self.update_checkpoint(events[-1])
    """

    _marked: Event | None = None

    def initialize(self, context: PartitionContext) -> Any:
        """Called once, before the partition's first batch is read (the default does nothing)."""

    def process_events(self, events: Sequence[Event], context: PartitionContext) -> Any:
        """Called for each batch of the partition, one at a time, in order (the default does nothing)."""

    def process_error(self, error: Exception, context: PartitionContext) -> Any:
        """Called with each error of this partition; ``context`` is an :class:`~rxhubs.ErrorContext`."""

    def close(self, reason: CloseReason, context: PartitionContext) -> Any:
        """Called once the partition's batches finished, before it is released (the default does nothing)."""

    def update_checkpoint(self, event: Event) -> Awaitable[None]:
        """Mark ``event`` (of the batch being processed, or an earlier one) as done: it is checkpointed.

        The mark takes effect at once; the write is coalesced and happens after :meth:`process_events`
        returned (a later mark wins). ``await`` it in an ``async`` method, or just call it in a plain one.
        """
        marked = self._marked
        if marked is None or event.sequence_number > marked.sequence_number:
            self._marked = event
        return _DONE
