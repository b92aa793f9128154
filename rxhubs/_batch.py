"""A batch of events as it travels through a pipeline, and what travels with it.

Besides its events, an :class:`EventBatch` carries three private things rxhubs operators rely on:

* a **lease** (:class:`_Lease`): operators that finish a batch later :meth:`~EventBatch.hold` it and call the
  returned :class:`Ack` when done; the partition source pulls more only while fewer than ``max_inflight`` of
  its batches are held (backpressure);
* its **origin** (:class:`Origin`): which read of which partition it came from, its place in that read, and
  the last event it was read with, kept when the events are filtered (:meth:`~EventBatch.with_events`). The
  checkpoint operator uses it to checkpoint only a contiguous prefix of what it has seen, so a pipeline that
  reorders batches can never make it pass unfinished work;
* the partition's **ownership session** (:class:`OwnershipSession`), when read by :func:`rxhubs.partitions`:
  whether the partition is still owned, where to report an error, and how to stop just this partition;
* its **state deltas** (``_state``, :class:`rxhubs.state._codec.StateDelta`): what stateful operators changed
  for it, folded into the committed state by the checkpoint operator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rxhubs._models import Event, LastEnqueuedEventProperties, Ownership, PartitionContext

if TYPE_CHECKING:
    from reactivex import Observable

    from rxhubs.state._codec import OperatorState, StateDelta  # a batch only carries them (rxhubs/state/ is above)

__all__ = ["Ack", "EventBatch", "Origin", "OwnershipSession"]


class Ack:
    """A handle that acknowledges one held batch; calling it more than once is harmless.

    Asynchronous operators (the checkpoint and Spark operators, ``hops.process``) call :meth:`EventBatch.hold`
    when they take a batch and the returned ``Ack`` once they are done with it; the partition source pulls more
    only while fewer than ``max_inflight`` of its batches are held.

    Example:
        >>> def on_next(batch):  # in an operator that finishes batches later  # doctest: +SKIP
        ...     ack = batch.hold()
        ...     loop.call_later(1.0, ack)  # one second later the source may pull again
    """

    __slots__ = ("_done", "_lease")

    def __init__(self, lease: _Lease | None) -> None:
        self._lease = lease
        self._done = False

    def __call__(self) -> None:
        if self._done:
            return
        self._done = True
        if self._lease is not None:
            self._lease.release()

    def __repr__(self) -> str:
        return f"Ack(done={self._done})"


class _Lease:
    """Counts holds on one batch; tells its source when the last one is released.

    Not thread-safe by design: holds and acks happen on the thread that drives the pipeline.
    """

    __slots__ = ("_holds", "_on_free")

    def __init__(self, on_free: Callable[[], None]) -> None:
        self._holds = 0
        self._on_free = on_free

    @property
    def held(self) -> bool:
        return self._holds > 0

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if self._holds == 0:
            self._on_free()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a batch came from.

    Attributes:
        read: One read of one partition (one subscription of its source): batches of different reads are
            never compared.
        index: The batch's place in that read, from 0, without gaps (empty batches count too).
        last: The last event the batch was read with (None for an empty batch): what a checkpoint records
            once the batch is done, even if a pipeline filtered it out.
    """

    read: object
    index: int
    last: Event | None


class OwnershipSession(Protocol):
    """The period of ownership a batch was read in, as operators see it (``rxhubs.balancing.PartitionSession``).

    An operator that writes on behalf of a partition (the checkpoint operator) asks :attr:`owned` before every
    write, and registers a *flusher*: an Observable the balancer subscribes before it releases the partition,
    so the last position is written first. An operator that fails on one partition's batch (``hops.process``)
    calls :meth:`fail`, which stops and releases only that partition. A checkpoint operator writing to a fenced
    store passes :attr:`period` to ``update_checkpoint_fenced``, and calls :meth:`lost` when the store refuses
    the write (another consumer claimed the partition meanwhile). Batches of :func:`rxhubs.partition_batches`
    carry no session.
    """

    @property
    def context(self) -> PartitionContext:
        """The partition."""
        ...

    @property
    def owned(self) -> bool:
        """True while this consumer owns the partition; False once released, lost or expired."""
        ...

    def register(self, key: object, flusher: Callable[[OwnershipSession], Observable[Any]]) -> None:
        """Call ``flusher(session)`` and wait for it before the partition is released."""
        ...

    def unregister(self, key: object) -> None:
        """Forget the flusher registered under ``key``."""
        ...

    def report(self, operation: str, error: Exception) -> None:
        """Tell the partition's error hook about ``error`` (the partition goes on)."""
        ...

    def fail(self, operation: str, error: Exception) -> None:
        """Stop this partition because of ``error``: it is released and read again from its checkpoint later."""
        ...

    @property
    def period(self) -> Ownership | None:
        """The ownership record that names this period for a fenced store (``update_checkpoint_fenced``), if any."""
        ...

    @property
    def store_timeout(self) -> float | None:
        """Seconds a store call for this partition may take (the consumer's ``store_timeout``), if known."""
        ...

    def lost(self, operation: str, error: Exception) -> None:
        """A fenced store refused a write: the partition is another consumer's. Stop it at once, release nothing."""
        ...

    @property
    def restored_state(self) -> Mapping[str, OperatorState] | None:
        """The operator state committed with the checkpoint this period started from (None if there was none)."""
        ...


@dataclass(frozen=True, slots=True)
class EventBatch(Sequence[Event]):
    """Events of one partition, in sequence-number order, as one unit of work.

    A batch is a sequence of :class:`~rxhubs.Event`; ``len(batch)`` may be 0 for a heartbeat batch.

    Attributes:
        context: The partition it came from.
        events: The events, in order.
        last_enqueued: The partition's newest event when the batch was read, if the receiver tracks it.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event, PartitionContext
        >>> ctx = PartitionContext("local", "telemetry", "$Default", "0")
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> b = EventBatch(ctx, (Event(b"a", 4, "40", t), Event(b"b", 5, "50", t)))
        >>> b.partition_id, b.first_sequence_number, b.last_sequence_number, len(b)
        ('0', 4, 5, 2)
    """

    context: PartitionContext
    events: tuple[Event, ...]
    last_enqueued: LastEnqueuedEventProperties | None = None
    _lease: _Lease | None = field(default=None, compare=False, repr=False)
    _session: OwnershipSession | None = field(default=None, compare=False, repr=False)
    _origin: Origin | None = field(default=None, compare=False, repr=False)
    _state: tuple[StateDelta, ...] = field(default=(), compare=False, repr=False)

    @property
    def partition_id(self) -> str:
        """The partition id, from the context."""
        return self.context.partition_id

    @property
    def first_sequence_number(self) -> int | None:
        """Sequence number of the first event, or None for an empty batch."""
        return self.events[0].sequence_number if self.events else None

    @property
    def last_sequence_number(self) -> int | None:
        """Sequence number of the last event, or None for an empty batch."""
        return self.events[-1].sequence_number if self.events else None

    @property
    def last_event(self) -> Event | None:
        """The last event, or None for an empty batch."""
        return self.events[-1] if self.events else None

    def hold(self) -> Ack:
        """Keep this batch counted as in flight until the returned :class:`Ack` is called.

        Call it in ``on_next`` when the batch will be finished later (written asynchronously, say).
        Batches not held are acknowledged as soon as ``on_next`` returns.
        """
        if self._lease is not None:
            self._lease.hold()
        return Ack(self._lease)

    def with_events(self, events: Sequence[Event]) -> EventBatch:
        """A batch with the same context, in-flight accounting and origin, carrying other events (e.g. filtered)."""
        return EventBatch(
            self.context, tuple(events), self.last_enqueued, self._lease, self._session, self._origin, self._state
        )

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __getitem__(self, index: Any) -> Any:
        return self.events[index]

    def __bool__(self) -> bool:
        return True
