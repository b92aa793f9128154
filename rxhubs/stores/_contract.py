"""The checkpoint store contract shared by every store.

A store keeps two kinds of records per (fully_qualified_namespace, eventhub_name, consumer_group):

* :class:`~rxhubs.Ownership` records, one per partition, claimed by compare-and-swap on ``etag``:
  a claim **without** an etag succeeds only if no record exists for that partition yet (create-only);
  a claim **with** an etag succeeds only if the stored record still has that etag. A claim that loses
  is simply absent from the returned list: it fails for that partition only, never for the others, and
  raises nothing. A won claim comes back with its new ``etag`` and the store's ``last_modified_time``
  (whatever the claim carried in that field is ignored). Releasing is a claim with ``owner_id=""``: the
  record stays (so the next claim of it needs its etag). Records are never deleted.
* :class:`~rxhubs.Checkpoint` records, one per partition: the last event processed. ``update_checkpoint``
  overwrites unconditionally (the checkpoint operator guarantees it never regresses and never writes for
  a partition it believes it no longer owns).

**Fencing** (optional: :class:`FencedCheckpointStore`). A consumer paused past its ownership expiry
(SIGSTOP, a long GC pause, a frozen VM) still believes it owns its partitions when it resumes; its late
``update_checkpoint`` would move the new owner's checkpoint back. A fenced store refuses those writes.

* A **period of ownership** is named by ``(owner_id, etag)`` of one version of the ownership record: the
  version won by the claim that gave the partition to its owner, or a later one passed to ``fence``.
  Renewals by the same owner keep the period (they change the record's etag, not the period). A claim that
  changes the owner id (a takeover, a steal, a claim of a released record) begins a new period; so does
  ``fence``, which also covers an owner re-claiming its own expired record.
* ``fence(ownership)``: the new owner calls it right after its claim won, before it reads where to start.
  ``ownership`` must be the stored record's current version (else :class:`~rxhubs.errors.OwnershipLostError`).
  It begins the period named by ``ownership`` and returns the partition's checkpoint (None when there is
  none): from then on every fenced write of an earlier period fails.
* ``update_checkpoint_fenced(checkpoint, ownership)``, with ``ownership`` the record passed to ``fence`` (or
  won by the claim): writes only while that period is the partition's current one; otherwise it raises
  :class:`~rxhubs.errors.OwnershipLostError` (not retriable) and leaves the checkpoint as it was.

The in-memory and SQLite stores check and write in one transaction. The blob store has no transaction across
two blobs: it fences on the checkpoint blob's etag (see :class:`~rxhubs.stores.BlobCheckpointStore` and
``docs/stores.md`` for the one window left: a partition that has no checkpoint yet). Stores without the two
verbs (yours, and stores written for the SDK's interface) keep working unfenced: rxhubs then writes with
``update_checkpoint``, as before.

**State** (optional: :class:`StatefulCheckpointStore`): ``fence_with_state`` and ``commit_state`` read and write
operator state together with the checkpoint, in the same fenced read and conditional write.

Etags are opaque strings, compared after stripping quotes; every write of a record gives it a new etag.
Keys (namespace, hub, consumer group, partition id) are compared case-insensitively, because the official
blob layout lower-cases them; listings return records with the spelling passed to the listing call.

Records a store cannot parse (a missing owner id, a non-numeric sequence number or offset, a foreign blob
under the prefix) are logged on the ``rxhubs.stores`` logger and treated as absent: never an exception from
``list_*``. An unparseable ownership record is listed as released (``owner_id=""``) with its etag, so it
can be claimed, and the claim repairs it; an unparseable checkpoint is left out.

A store that cannot be reached raises :class:`~rxhubs.errors.StoreError` (retriable). A claim of several
partitions raises only if nothing was won and some partition failed for a reason other than losing; a
failure next to wins is logged and that partition left out, like a lost one.

rxhubs calls the verbs through :func:`rxhubs._rx.from_coroutine`, on the pipeline's scheduler. A store
whose verbs await only rxhubs' clock primitives (the in-memory store awaits nothing) therefore also runs in
virtual time under ``reactivex.testing.TestScheduler``; :func:`rxhubs._rx.now` is then the virtual clock.

Stores written for the Azure SDK's own interface (dict records, sync or aio) are adapted once, at the edge,
by :func:`~rxhubs.stores.as_checkpoint_store`: every public function that takes a store accepts either
(:data:`StoreLike`), and everything behind it sees a :class:`CheckpointStore`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeAlias, TypeGuard, runtime_checkable

from rxhubs._models import Checkpoint, Ownership

__all__ = [
    "CheckpointStore",
    "FencedCheckpointStore",
    "HandingCheckpointStore",
    "SdkStyleCheckpointStore",
    "StatefulCheckpointStore",
    "StoreLike",
    "is_fenced",
    "is_stateful",
    "takes_hands",
]


@runtime_checkable
class CheckpointStore(Protocol):
    """Ownership and checkpoints for consumer groups (the Azure SDK's ``CheckpointStore`` shape, async).

    Every rxhubs store subclasses it explicitly; do the same in a store of your own, so that
    :func:`~rxhubs.stores.as_checkpoint_store` takes it as is (a structural match alone cannot tell typed
    records from the SDK's dicts).

    Example:
        >>> async def show(store):  # doctest: +SKIP
        ...     for cp in await store.list_checkpoints("ns", "telemetry", "$Default"):
        ...         print(cp.partition_id, cp.sequence_number)
    """

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        """Every ownership record of the consumer group, with etags and last-modified times."""
        ...

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Compare-and-swap each record; return those won, updated (new etag and time)."""
        ...

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint of one partition, overwriting the previous one."""
        ...

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """Every checkpoint of the consumer group."""
        ...


@runtime_checkable
class FencedCheckpointStore(CheckpointStore, Protocol):
    """A :class:`CheckpointStore` that also refuses the checkpoint writes of former owners (fencing).

    The in-memory, SQLite and blob stores are fenced; rxhubs uses the two verbs whenever a store has both
    (:func:`is_fenced`). See the module docstring for the rules, and ``docs/stores.md`` per store.

    Example:
        >>> import asyncio
        >>> from rxhubs import Checkpoint, Ownership
        >>> from rxhubs.errors import OwnershipLostError
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> async def zombie():
        ...     store = InMemoryCheckpointStore()
        ...     [a] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "a")])
        ...     await store.fence(a)
        ...     await store.update_checkpoint_fenced(Checkpoint("ns", "hub", "$Default", "0", "90", 9), a)
        ...     [b] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "b", etag=a.etag)])
        ...     start = await store.fence(b)  # b takes over, and reads where to start
        ...     try:
        ...         await store.update_checkpoint_fenced(Checkpoint("ns", "hub", "$Default", "0", "50", 5), a)
        ...     except OwnershipLostError:
        ...         pass
        ...     return start.sequence_number, (await store.list_checkpoints("ns", "hub", "$Default"))[0].sequence_number
        >>> asyncio.run(zombie())
        (9, 9)
    """

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        """Begin the period named by ``ownership`` (the current version of its record); its checkpoint, or None.

        Raises:
            OwnershipLostError: The record is not at that version any more (someone else claimed it).
        """
        ...

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        """Store the checkpoint only while ``ownership``'s period is the partition's current one.

        Raises:
            OwnershipLostError: Another period began (another owner claimed the partition, or fenced it);
                the stored checkpoint is unchanged.
        """
        ...


def is_fenced(store: CheckpointStore) -> TypeGuard[FencedCheckpointStore]:
    """Whether ``store`` has the fencing verbs (``fence`` and ``update_checkpoint_fenced``).

    A ``TypeGuard``: where it is true, type checkers know ``store`` is a :class:`FencedCheckpointStore`.

    Example:
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> is_fenced(InMemoryCheckpointStore()), is_fenced(object())
        (True, False)
    """
    return callable(getattr(store, "fence", None)) and callable(getattr(store, "update_checkpoint_fenced", None))


@runtime_checkable
class StatefulCheckpointStore(FencedCheckpointStore, Protocol):
    """A :class:`FencedCheckpointStore` that also keeps operator state with each checkpoint, in the same write.

    The state is opaque bytes (rxhubs writes :func:`rxhubs.state._codec.encode`'s). Rules, on top of fencing:

    * ``commit_state(checkpoint, ownership, state)`` writes the checkpoint **and** the state in one conditional
      write: both, only while ``ownership``'s period is current, or neither (:class:`~rxhubs.errors.
      OwnershipLostError`, as ``update_checkpoint_fenced``);
    * ``fence_with_state(ownership)`` is ``fence`` that also returns the state committed with the checkpoint
      it returns, from the same read: ``(checkpoint, state)``;
    * a checkpoint written **without** state (``update_checkpoint``, ``update_checkpoint_fenced``, the official
      SDK) drops the state: it does not describe the events up to the new checkpoint, so ``fence_with_state``
      returns None for it, never the older state.

    The in-memory, SQLite and blob stores keep state (``docs/stores.md``: where, and what it costs).

    Example:
        >>> import asyncio
        >>> from rxhubs import Checkpoint, Ownership
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> async def handover():
        ...     store = InMemoryCheckpointStore()
        ...     [a] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "a")])
        ...     await store.fence_with_state(a)
        ...     await store.commit_state(Checkpoint("ns", "hub", "$Default", "0", "90", 9), a, b"counts")
        ...     [b] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "b", etag=a.etag)])
        ...     checkpoint, state = await store.fence_with_state(b)
        ...     return checkpoint.sequence_number, state
        >>> asyncio.run(handover())
        (9, b'counts')
    """

    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        """``fence``, returning the checkpoint and the state committed with it (None: none, or dropped).

        Raises:
            OwnershipLostError: The record is not at that version any more (someone else claimed it).
        """
        ...

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        """Store the checkpoint and ``state`` together, only while ``ownership``'s period is current.

        Raises:
            OwnershipLostError: Another period began; the stored checkpoint and state are unchanged.
        """
        ...


def is_stateful(store: CheckpointStore) -> TypeGuard[StatefulCheckpointStore]:
    """Whether ``store`` keeps operator state with its checkpoints (``fence_with_state`` and ``commit_state``).

    A ``TypeGuard``: where it is true, type checkers know ``store`` is a :class:`StatefulCheckpointStore`.

    Example:
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> is_stateful(InMemoryCheckpointStore()), is_stateful(object())
        (True, False)
    """
    return (
        is_fenced(store)
        and callable(getattr(store, "fence_with_state", None))
        and callable(getattr(store, "commit_state", None))
    )


class HandingCheckpointStore(CheckpointStore, Protocol):
    """A :class:`CheckpointStore` that takes note of handovers, so that the recipient's fence needs no write.

    The blob store is one (its hands: ``rxhubs/stores/_blob_hands.py``); the balancing loop calls
    :meth:`note_handover` for each partition it hands to another consumer, in the release's claim
    (:func:`takes_hands`).
    """

    def note_handover(self, period: Ownership, record: Ownership, final: Checkpoint | None = None) -> None:
        """``period`` is over: its partition goes to the owner ``record`` names (``final``: a write in flight)."""
        ...


def takes_hands(store: CheckpointStore) -> TypeGuard[HandingCheckpointStore]:
    """Whether ``store`` takes note of handovers (``note_handover``: a hand for the recipient).

    A ``TypeGuard``: where it is true, type checkers know ``store`` is a :class:`HandingCheckpointStore`.

    Example:
        >>> from rxhubs.stores import BlobCheckpointStore, InMemoryCheckpointStore
        >>> blob = BlobCheckpointStore.from_connection_string("UseDevelopmentStorage=true", "checkpoints")
        >>> takes_hands(blob), takes_hands(InMemoryCheckpointStore())
        (True, False)
    """
    return callable(getattr(store, "note_handover", None))


class SdkStyleCheckpointStore(Protocol):
    """A store written for the Azure SDK's ``CheckpointStore`` interface: dict records, sync or async verbs.

    Example:
        >>> from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore  # doctest: +SKIP
        >>> rxhubs.consume(hub, "$Default", BlobCheckpointStore.from_connection_string(...))  # doctest: +SKIP
    """

    def list_ownership(self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str) -> Any: ...

    def claim_ownership(self, ownership_list: Iterable[dict[str, Any]]) -> Any: ...

    def update_checkpoint(self, checkpoint: dict[str, Any]) -> Any: ...

    def list_checkpoints(self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str) -> Any: ...


#: What the public API accepts as a store; :func:`~rxhubs.stores.as_checkpoint_store` makes it a
#: :class:`CheckpointStore`.
StoreLike: TypeAlias = CheckpointStore | SdkStyleCheckpointStore
