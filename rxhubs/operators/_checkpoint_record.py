"""The checkpoint operator's record of one partition, and the state it commits with each checkpoint (private).

A stateful operator (``hops.window``, ``hops.scan_state``) attaches a :class:`~rxhubs.state._codec.StateDelta`
to every batch it passes on. The checkpoint operator folds the deltas of the **contiguous finished prefix**
into its committed copy of the partition's state (:class:`~rxhubs.state._committed.CommittedState`), in the
batches' read order, and writes the copy, encoded, in the same conditional store call as the checkpoint that
ends the prefix (``StatefulCheckpointStore.commit_state``): a committed checkpoint always comes with exactly
the state of the events up to it. Deltas of batches past a gap wait with them in
:class:`~rxhubs.operators._prefix.ContiguousPrefix`. The copy of a new period of ownership starts from the state
restored with its checkpoint (``OwnershipSession.restored_state``), so a write carries the keys this owner has
not touched too.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

from reactivex import abc

from rxhubs._batch import EventBatch, OwnershipSession
from rxhubs._models import Checkpoint, Event, Ownership, PartitionContext
from rxhubs._rx import deadline
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.operators._prefix import ContiguousPrefix
from rxhubs.state._committed import CommittedState
from rxhubs.stores import CheckpointStore, FencedCheckpointStore, StatefulCheckpointStore
from rxhubs.stores._write_gate import in_turn

__all__ = ["PartitionRecord", "is_owned", "no_state_support", "store_write"]


def is_owned(session: OwnershipSession | None) -> bool:
    """Whether a batch's session still owns its partition (True for batches without one)."""
    return session is None or session.owned


@dataclass(eq=False, slots=True)
class PartitionRecord:
    """The checkpoint operator's record of one partition: what is pending, in flight, written, and the state."""

    context: PartitionContext
    session: OwnershipSession | None = None
    prefix: ContiguousPrefix = field(default_factory=ContiguousPrefix)
    state: CommittedState = field(default_factory=CommittedState)
    pending: Checkpoint | None = None
    recorded: Checkpoint | None = None  # the newest position of this period (a state-only change reuses it)
    watermark: int = -1
    in_flight: Checkpoint | None = None
    written: Checkpoint | None = None
    last_write_at: float | None = None
    batches: int = 0
    attempt: int = 0
    flushing: bool = False
    timer: abc.DisposableBase | None = None
    retrying: abc.DisposableBase | None = None  # the retry of a failed write, scheduled after its backoff
    waiters: list[Callable[[], None]] = field(default_factory=list)
    #: Told the position of a flush's last write once it is sent (without state, nothing left after it)
    finals: list[Callable[[Checkpoint], None]] = field(default_factory=list)
    #: The position a flush of this period named as its last (a hand carries it): an older write refused, or this one
    #: not written once the partition is released, is what the handover meant, not a failure to report
    announced: Checkpoint | None = None

    @property
    def idle(self) -> bool:
        return self.pending is None and self.in_flight is None

    def begin(self, session: OwnershipSession | None) -> None:
        """A new period of ownership: it started from the stored checkpoint and state, so start afresh.

        Its claim was just answered, so a backoff left by the last period's failed writes ends too.
        """
        self.session, self.watermark, self.pending, self.recorded = session, -1, None, None
        self.announced = None
        self.attempt = 0
        if self.retrying is not None:
            self.retrying.dispose()
            self.retrying = None
        self.prefix = ContiguousPrefix()
        self.state = CommittedState(session.restored_state if session is not None else None)

    def take(self, batch: EventBatch, position: Event | None) -> tuple[bool, bool]:
        """Take a finished batch in: advance the prefix, fold the deltas it releases, record the position.

        Returns:
            Whether there is something new to write (a newer position, or a state change at the same one), and
            whether the batch arrived ahead of one still missing.
        """
        origin = batch._origin
        if origin is None:  # a batch made by hand: its own last event, never going back
            last, reordered, released = position or batch.last_event, False, [batch._state]
        else:
            last, reordered, released = self.prefix.advance_with(origin, position or origin.last, batch._state)
        changed = self.state.fold(delta for deltas in released for delta in deltas)
        if last is not None and last.sequence_number > self.watermark:
            self.watermark = last.sequence_number
            self.pending = self.recorded = Checkpoint.of(batch.context, last)
            return True, reordered
        if changed and self.recorded is not None:  # a state-only change: written at the same position
            self.pending = self.pending or self.recorded
            return True, reordered
        return False, reordered  # nothing to record (or no position of this period yet: the next one carries it)


def no_state_support(store: CheckpointStore, batch: EventBatch) -> ConfigurationError:
    """The error of a stateful pipeline whose checkpoint store cannot keep its state."""
    names = ", ".join(sorted({d.name for d in batch._state}))
    return ConfigurationError(
        f"the pipeline has stateful operators ({names}) but the checkpoint store {store!r} cannot keep their "
        "state with the checkpoint (it has no fence_with_state/commit_state): use InMemoryCheckpointStore, "
        "SqliteCheckpointStore or BlobCheckpointStore, or the state would be lost at every restart"
    )


def store_write(
    store: CheckpointStore,
    checkpoint: Checkpoint,
    period: Ownership | None,
    state: bytes | None,
    limit: float,
) -> Coroutine[Any, Any, None]:
    """One store call, bounded by ``limit`` seconds from its turn: the pair (``commit_state``), fenced, or plain."""

    def call() -> Coroutine[Any, Any, None]:
        if period is not None and state is not None:
            return cast(StatefulCheckpointStore, store).commit_state(checkpoint, period, state)
        if period is not None:
            return cast(FencedCheckpointStore, store).update_checkpoint_fenced(checkpoint, period)
        return store.update_checkpoint(checkpoint)

    async def timed() -> None:
        async with deadline(limit):
            await call()

    async def bounded() -> None:
        try:
            await in_turn(store, timed)  # the timeout runs from the write's turn (_write_gate)
        except TimeoutError:
            raise StoreError(
                f"checkpoint of partition {checkpoint.partition_id} did not answer within {limit:.1f} s"
            ) from None

    return bounded()
