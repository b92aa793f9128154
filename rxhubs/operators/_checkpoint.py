"""The checkpoint operator: record, per partition, the last event that passed through, in few store writes.

This module is the operator and its options; one subscription's work (remember, write, retry, flush for the
balancer) is :class:`~rxhubs.operators._checkpointer.Checkpointer`, and one partition's record is
``_checkpoint_record``.
"""

from __future__ import annotations

from collections.abc import Callable

from reactivex import Observable, abc

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs._retry import Backoff
from rxhubs.errors import ConfigurationError
from rxhubs.operators._base import stateful_operator
from rxhubs.operators._checkpointer import Checkpointer
from rxhubs.stores import StoreLike, as_checkpoint_store

__all__ = ["checkpoint"]


def checkpoint(
    store: StoreLike,
    *,
    max_interval: float | None = 5.0,
    every: int | None = None,
    retry: Backoff | None = None,
    scheduler: abc.SchedulerBase | None = None,
    timeout: float | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Checkpoint, per partition, the last event that passed through; batches go on unchanged.

    Put it after the work that must succeed first (a Spark write, :func:`process`): what reached it is done, so
    resuming after its checkpoint is at-least-once end to end, with duplicates bounded by what passed since the
    last write.

    **It never passes unfinished work.** A checkpoint covers a batch only once every earlier batch of the same
    read has reached the operator too: if a pipeline reorders batches (a ``flat_map`` over async work), only
    the contiguous prefix is checkpointed, and a warning says so once. A batch whose events were filtered
    (:meth:`~rxhubs.EventBatch.with_events`) still counts with the last event it was read with.

    Per partition it remembers the newest event and writes at most one checkpoint per ``max_interval``
    seconds (the first at once, then the latest when the interval is up; the first of a partition another
    consumer handed over once the interval is up too: that consumer wrote where it starts), or after ``every``
    batches when given; writes are coalesced (latest wins), never go back, one at a time per partition and concurrent
    across partitions. It writes nothing for a partition this consumer no longer owns (handed over, stolen,
    expired: the batch's ownership session says so), and flushes the latest position when its source
    completes or errors, when :func:`rxhubs.partitions` hands a partition over or releases it at shutdown
    (before the release), and on a graceful stop. Each write is bounded by ``timeout``: a store that does not
    answer fails the write, so a stop never waits on it for long (a position not written because the partition
    was lost meanwhile is logged). A failed write is retried with backoff, keeping the position (a newer one
    replaces it; batches arriving meanwhile wait for the retry), each failure reported to ``on_partition_error``
    (operation ``"checkpoint"``). When retries run out, the store keeps the last checkpoint written (nothing after it
    counts as done) and a :class:`~rxhubs.errors.StoreError` naming the partition and sequence number stops
    that partition only (it is released and read again from that checkpoint later); batches read without
    balancing have no partition to stop, so the stream errors with it.

    **Operator state.** Batches that went through stateful operators (``hops.window``, ``hops.scan_state``)
    carry what they changed; the operator folds the changes of the contiguous prefix into its copy of the
    partition's state (which starts from the state the partition was claimed with) and writes it in the same
    store call as the checkpoint (``StatefulCheckpointStore.commit_state``), so a committed checkpoint always
    comes with exactly the state of the events up to it. A change of state at the same position is written too.
    A store that cannot keep state fails the stream with a :class:`~rxhubs.errors.ConfigurationError`.

    Marble diagram (``max_interval=5``; ``a``..``d`` batches, whose last events are written)::

        batches:     -a-b-c---d----|
        checkpoint:  -a-b-c---d----|     (unchanged)
        writes:      -a----c----d---     (a at once; c when 5 s passed since a; d 5 s after c)

    Args:
        store: The checkpoint store (usually the one given to :func:`rxhubs.consume`).
        max_interval: Most one write per partition per this many seconds (None: only ``every`` and flushes).
        every: Also write after this many batches of a partition since its last write.
        retry: Backoff for failed writes (default: 0.2 s doubling to 10 s, 10 retries).
        scheduler: Scheduler for timers and writes (default: the one given at subscribe time).
        timeout: Seconds a write may take before it counts as failed (a retriable
            :class:`~rxhubs.errors.StoreError`) and is retried (default: the consumer's ``store_timeout``,
            one balancing interval unless set; 10 s for batches read without balancing).

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]``.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import rxhubs
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"a", b"b", b"c"], partition_id="0")
        >>> store, scheduler = rxhubs.stores.InMemoryCheckpointStore(), TestScheduler()
        >>> _ = rxhubs.consume(hub, "$Default", store).pipe(hops.checkpoint(store)).subscribe(scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> [(c.partition_id, c.sequence_number) for c in store.observe_list_checkpoints(
        ...     hub.fully_qualified_namespace, hub.eventhub_name, "$Default").run()]
        [('0', 2)]
    """
    return checkpoint_with(
        store, max_interval=max_interval, every=every, retry=retry, scheduler=scheduler, timeout=timeout
    )


def checkpoint_with(
    store: StoreLike,
    *,
    max_interval: float | None = 5.0,
    every: int | None = None,
    retry: Backoff | None = None,
    scheduler: abc.SchedulerBase | None = None,
    position: Callable[[EventBatch], Event | None] | None = None,
    timeout: float | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """:func:`checkpoint`, recording ``position(batch)`` instead of the batch's last event (the processor form).

    Contiguity, coalescing, ownership and flushing are the same; a batch whose ``position`` is None counts as
    done without moving the checkpoint.
    """
    if max_interval is not None and (
        isinstance(max_interval, bool) or not isinstance(max_interval, int | float) or max_interval < 0
    ):
        raise ConfigurationError(f"max_interval must be a number of seconds >= 0 or None, got {max_interval!r}")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ConfigurationError(f"every must be an int >= 1 or None, got {every!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise ConfigurationError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
    if max_interval is None and every is None:
        raise ConfigurationError("give max_interval, every, or both: otherwise only flushes would write")
    if store is None:
        raise ConfigurationError("store is required: e.g. rxhubs.stores.SqliteCheckpointStore('checkpoints.db')")
    checked = as_checkpoint_store(store)  # a store written for the Azure SDK's interface is wrapped, once
    backoff = retry or Backoff()

    return stateful_operator("checkpoint()", scheduler, lambda observer, resolved: Checkpointer(
        observer, checked, resolved, max_interval, every, backoff, position, timeout
    ))
