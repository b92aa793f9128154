"""``hops.process``: work per batch, sync or async, in order per partition, failures kept to their partition.

This module is the operator and its options; one subscription's work (lanes per partition, retries, poison,
order) is :class:`~rxhubs.operators._processor.Processor`.
"""

from __future__ import annotations

from collections.abc import Callable

from reactivex import Observable, abc

from rxhubs._batch import EventBatch
from rxhubs._retry import Backoff
from rxhubs.errors import ConfigurationError
from rxhubs.operators._base import stateful_operator
from rxhubs.operators._processor import PoisonHandler, Processor, Work

__all__ = ["PoisonHandler", "Work", "process"]


def process(
    fn: Work,
    *,
    concurrency: int = 1,
    retry: Backoff | None = None,
    on_poison: PoisonHandler | None = None,
    blocking: bool = True,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Run ``fn(batch)`` for every batch; pass each batch on once its work is done, in order per partition.

    ``fn`` may be a coroutine function (awaited on the pipeline's loop) or a plain function (run in a worker
    thread, so a blocking call does not stall the other partitions; ``blocking=False`` runs it inline).
    Its return value is ignored: the batch itself flows on, so :func:`checkpoint` and
    :func:`rxhubs.spark.write` can follow. Under a virtual-time scheduler everything runs inline, in order.

    **Order and concurrency.** Batches of one partition are emitted strictly in the order they arrived, each
    only after its ``fn`` completed; with ``concurrency > 1`` up to that many batches of one partition run at
    once and are still emitted in order. Partitions run independently. Each batch is held until emitted, so
    the source's ``max_inflight`` bounds memory (use ``max_inflight >= concurrency`` to keep every slot busy).

    **Failures stay in their partition.** A failed ``fn`` is retried on the same batch with ``retry``
    (default: 3 retries, 0.2 s doubling), each failure reported to ``on_partition_error`` with the operation
    ``"process"``; later batches of that partition wait (a batch waiting for its retry keeps its slot, so with
    ``concurrency=1`` nothing overtakes it), the other partitions go on. When retries run out the
    batch is *poison*:

    * with ``on_poison``: ``on_poison(batch, error)`` is called (sync or async: a dead-letter sink) and, once
      it returned, the batch moves on as if processed, so a checkpoint may pass it;
    * without: the partition is stopped and released (its batches in flight are dropped, nothing after its
      last checkpoint is recorded), and it is read again from its checkpoint after a backoff, here or by
      another consumer. Batches read without balancing (:func:`rxhubs.partition_batches`) have no partition
      to stop: the stream errors instead.

    ``retry=Backoff(max_retries=None)`` retries for ever (the partition waits until the cause is fixed).

    Marble diagram (``concurrency=2``; ``a``..``c`` batches of one partition; ``b``'s work is the quickest)::

        batches:   -a-b-c------|
        fn done:   ----b-a--c--
        process:   ------(ab)-c|     (b waits for a: order is kept)

    Args:
        fn: The work, ``fn(batch)``.
        concurrency: Most batches of one partition in ``fn`` at once.
        retry: How often and how long to retry a failed ``fn`` before the batch counts as poison.
        on_poison: Called with a poison batch and its last error; then the batch moves on.
        blocking: Run a plain (not ``async``) ``fn`` in a worker thread (default) or inline.
        scheduler: Scheduler for timers and work (default: the one given at subscribe time).

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]``.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import rxhubs
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
        >>> _ = hub.send([b"a", b"b"], partition_id="0"), hub.send([b"c"], partition_id="1")
        >>> async def enrich(batch):
        ...     await rxhubs.testing.sleep(1.0)   # an async call, in virtual time here
        >>> store, scheduler, done = rxhubs.stores.InMemoryCheckpointStore(), TestScheduler(), []
        >>> _ = rxhubs.consume(hub, "$Default", store).pipe(
        ...     hops.process(enrich, concurrency=4), hops.checkpoint(store)
        ... ).subscribe(lambda b: done.append((b.partition_id, len(b), scheduler.clock)), scheduler=scheduler)
        >>> scheduler.advance_to(2.0)
        >>> sorted(done)
        [('0', 2, 1.0), ('1', 1, 1.0)]
    """
    if not callable(fn):
        raise ConfigurationError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
    if retry is not None and not isinstance(retry, Backoff):
        raise ConfigurationError(f"retry must be an rxhubs.Backoff, got {type(retry).__name__}")
    if on_poison is not None and not callable(on_poison):
        raise ConfigurationError(f"on_poison must be callable, got {type(on_poison).__name__}")
    backoff = retry or Backoff(max_retries=3)

    return stateful_operator("process()", scheduler, lambda observer, resolved: Processor(
        observer, resolved, fn, concurrency, backoff, on_poison, blocking
    ))

