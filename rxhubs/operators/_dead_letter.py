"""``hops.dead_letter``: an ``on_poison`` handler that publishes a failed batch's events with why and from where."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs.operators._publish import Groups, as_publisher, send_grouped
from rxhubs.transport._connection_string import redact
from rxhubs.transport._publisher import OutgoingEvent

__all__ = ["dead_letter", "dead_letter_properties"]

#: Longest error message put in a dead-lettered event's properties.
MAX_MESSAGE = 1000


def dead_letter_properties(batch: EventBatch, error: BaseException) -> dict[str, Any]:
    """The properties every dead-lettered event of ``batch`` carries (its own position is added per event).

    The message is the error's first line with keys and signatures removed, at most 1000 characters.

    Example:
        >>> import datetime as dt, rxhubs
        >>> ctx = rxhubs.PartitionContext("ns", "orders", "$Default", "3")
        >>> batch = rxhubs.EventBatch(ctx, ())
        >>> props = dead_letter_properties(batch, ValueError("bad SharedAccessKey=c2VjcmV0 in row"))
        >>> props["rxhubs.error.type"], props["rxhubs.error.message"], props["rxhubs.source.partition_id"]
        ('ValueError', 'bad SharedAccessKey=*** in row', '3')
    """
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    context = batch.context
    return {
        "rxhubs.error.type": type(error).__name__,
        "rxhubs.error.message": redact(text)[:MAX_MESSAGE],
        "rxhubs.source.namespace": context.fully_qualified_namespace,
        "rxhubs.source.eventhub": context.eventhub_name,
        "rxhubs.source.consumer_group": context.consumer_group,
        "rxhubs.source.partition_id": context.partition_id,
    }


def dead_letter(target: Any) -> Callable[[EventBatch, Exception], Coroutine[Any, Any, None]]:
    """An ``on_poison`` handler for :func:`process` and :func:`publish`: publish the failed batch to ``target``.

    Each event of the poison batch is published unchanged (body, application properties, partition key),
    with these application properties added: ``rxhubs.error.type`` and ``rxhubs.error.message`` (the error's
    first line, keys and signatures removed), and the source position: ``rxhubs.source.namespace``,
    ``rxhubs.source.eventhub``, ``rxhubs.source.consumer_group``, ``rxhubs.source.partition_id``,
    ``rxhubs.source.sequence_number``, ``rxhubs.source.offset``. The batch moves on (and may be
    checkpointed) only once the target acknowledged them all; if that fails too, the source partition stops
    as it would without ``on_poison``.

    Marble diagram (``hops.process(parse, on_poison=dead_letter(dlq))``; ``b`` cannot be parsed)::

        batches:   -a-b-c-|
        process:   -a-b-c-|      (b moves on once it was dead-lettered)
        dlq:       ---b---       (b's events, with their error and position)

    Args:
        target: A target as :func:`publish` takes: an ``rxhubs.EventHub``, an ``InMemoryEventHub``, an
            ``azure.eventhub.aio.EventHubProducerClient`` or a :class:`Publisher`.

    Returns:
        ``handler(batch, error)``, a coroutine function to pass as ``on_poison``.

    Raises:
        ConfigurationError: At call time, for an unusable target.

    Example:
        >>> import rxhubs
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> source, dlq = rxhubs.testing.InMemoryEventHub(1), rxhubs.testing.InMemoryEventHub(1)
        >>> _ = source.send([b"ok", b"bad"], partition_id="0")
        >>> def parse(batch):
        ...     if any(e.body == b"bad" for e in batch):
        ...         raise ValueError("bad row")
        >>> scheduler = TestScheduler()
        >>> _ = rxhubs.partition_batches(source, "0", max_batch_size=1).pipe(
        ...     hops.process(parse, retry=rxhubs.Backoff(max_retries=0), on_poison=hops.dead_letter(dlq))
        ... ).subscribe(scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> [(e.body, e.properties["rxhubs.error.message"]) for e in dlq.events("0")]
        [(b'bad', 'bad row')]
    """
    publisher = as_publisher(target)

    async def handler(batch: EventBatch, error: Exception) -> None:
        common = dead_letter_properties(batch, error)
        groups: Groups = {}
        for event in batch.events:
            props = {
                **event.properties,
                **common,
                "rxhubs.source.sequence_number": event.sequence_number,
                "rxhubs.source.offset": event.offset,
            }
            groups.setdefault((None, event.partition_key), []).append(OutgoingEvent(event.body, props))
        if groups:
            await send_grouped(publisher, groups)

    return handler
