"""The checkpoint store contract shared by every store.

A store keeps two kinds of records per (fully_qualified_namespace, eventhub_name, consumer_group):

* :class:`~rxhubs.Ownership` records, one per partition, claimed by compare-and-swap on ``etag``:
  a claim **without** an etag succeeds only if no record exists for that partition yet (create-only);
  a claim **with** an etag succeeds only if the stored record still has that etag. A claim that loses
  is simply absent from the returned list: it fails for that partition only, never for the others, and
  raises nothing. A won claim comes back with its new ``etag`` and the store's ``last_modified_time``.
  Releasing is a claim with ``owner_id=""``.
* :class:`~rxhubs.Checkpoint` records, one per partition: the last event processed. ``update_checkpoint``
  overwrites unconditionally (the checkpoint operator guarantees it never regresses and never writes for
  a partition it no longer owns).

Records a store cannot parse (a missing owner id, a non-numeric sequence number, a foreign blob under
the prefix) are logged and treated as absent: never an exception from ``list_*``.
A store that cannot be reached raises :class:`~rxhubs.errors.StoreError` (retriable).

Stores may also offer Rx-native forms of the verbs, ``observe_list_ownership(...)`` and so on, each a
one-shot Observable running on the subscribing scheduler (whose clock then stamps ``last_modified_time``).
rxhubs prefers them when present: that is how the in-memory store runs in virtual time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from rxhubs._models import Checkpoint, Ownership

__all__ = ["CheckpointStore"]


@runtime_checkable
class CheckpointStore(Protocol):
    """Ownership and checkpoints for consumer groups (the Azure SDK's ``CheckpointStore`` shape, async).

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
