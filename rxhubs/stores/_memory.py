"""The in-memory checkpoint store: for tests and single-process use, in real or virtual time."""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from reactivex import Observable

from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx import from_coroutine, now
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores._common import FENCED_VERBS, VERBS, Key, key_of, lost, normalize_etag, record_key
from rxhubs.stores._contract import StatefulCheckpointStore

__all__ = ["InMemoryCheckpointStore"]


class InMemoryCheckpointStore(StatefulCheckpointStore):
    """Ownership and checkpoints in a dict: the contract of every store, with no I/O.

    Its verbs never suspend, so a pipeline using it also runs in virtual time under
    ``reactivex.testing.TestScheduler``: claims are then stamped with the scheduler's clock
    (:func:`rxhubs._rx.now`; the wall clock under asyncio) unless ``clock`` is given. ``observe_<verb>(...)``
    wraps each verb as a one-shot Observable, handy in tests (``store.observe_list_checkpoints(...).run()``).

    Etags are versions: a counter shared by the whole store, rendered as a string, so no two writes ever
    produce the same etag.

    It is fenced (:class:`~rxhubs.stores.FencedCheckpointStore`): each ownership record keeps the etag that
    names its period of ownership, and a fenced write checks it and writes under one lock. A fenced write
    counts as an ``update_checkpoint`` call (and fails with the faults injected for that verb). It keeps
    operator state with the checkpoint (:class:`~rxhubs.stores.StatefulCheckpointStore`): ``commit_state``
    counts as ``update_checkpoint``, ``fence_with_state`` as ``fence``.

    **Fault injection** (for tests of what happens when the store is down):

    * ``store.available = False`` makes every call raise :class:`~rxhubs.errors.StoreError` (retriable)
      until it is set back to ``True``;
    * ``store.fail(verb, times=n)`` makes the next ``n`` calls of ``verb`` (any verb when None) fail,
      ``times=None`` every call until :meth:`heal`.

    ``store.calls`` counts the calls of each verb, failed ones included (``store.calls["update_checkpoint"]``).

    Args:
        clock: Seconds since the epoch to stamp claims with; default the driving scheduler's clock.

    Example:
        >>> import asyncio
        >>> from rxhubs import Ownership
        >>> store = InMemoryCheckpointStore()
        >>> won = asyncio.run(store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "me")]))
        >>> won[0].owner_id, won[0].etag, store.calls["claim_ownership"]
        ('me', '1', 1)
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.available = True
        self._clock = clock or now
        self._lock = threading.Lock()
        self._versions = itertools.count(1)
        self._ownership: dict[Key, dict[str, Ownership]] = {}
        self._checkpoints: dict[Key, dict[str, Checkpoint]] = {}
        self._periods: dict[Key, dict[str, str]] = {}
        self._states: dict[Key, dict[str, bytes]] = {}
        self._failures: list[tuple[str | None, int | None, BaseException | None]] = []

    # -- fault injection -------------------------------------------------------------------------------

    def fail(self, verb: str | None = None, *, times: int | None = 1, error: BaseException | None = None) -> None:
        """Make the next ``times`` calls of ``verb`` fail (every verb when None; ``times=None``: until healed).

        Args:
            verb: One of ``list_ownership``, ``claim_ownership``, ``update_checkpoint`` (fenced writes too),
                ``list_checkpoints``, ``fence``.
            times: How many calls fail, or None for all of them until :meth:`heal`.
            error: The exception raised; default a retriable :class:`~rxhubs.errors.StoreError`.

        Raises:
            ConfigurationError: For an unknown verb or a count below 1.

        Example:
            >>> import asyncio
            >>> store = InMemoryCheckpointStore()
            >>> store.fail("list_checkpoints", times=1)
            >>> try:
            ...     asyncio.run(store.list_checkpoints("ns", "hub", "$Default"))
            ... except StoreError as exc:
            ...     exc.retriable
            True
            >>> asyncio.run(store.list_checkpoints("ns", "hub", "$Default"))
            []
        """
        if verb is not None and verb not in VERBS + FENCED_VERBS[:1]:
            raise ConfigurationError(f"unknown store verb {verb!r}; expected one of {', '.join(VERBS)}, fence")
        if times is not None and times < 1:
            raise ConfigurationError(f"times must be >= 1 or None, got {times!r}")
        with self._lock:
            self._failures.append((verb, times, error))

    def heal(self) -> None:
        """Cancel every injected failure and make the store available again."""
        with self._lock:
            self._failures.clear()
            self.available = True

    def _enter(self, verb: str) -> None:
        """Count the call and raise an injected failure if one applies (called with the lock held)."""
        self.calls[verb] += 1
        if not self.available:
            raise StoreError(f"in-memory checkpoint store unavailable ({verb}; store.available is False)")
        for index, (target, times, error) in enumerate(self._failures):
            if target is None or target == verb:
                if times is not None:
                    if times <= 1:
                        del self._failures[index]
                    else:
                        self._failures[index] = (target, times - 1, error)
                raise error if error is not None else StoreError(f"injected failure of {verb} (store.fail)")

    def peek(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> tuple[list[Ownership], list[Checkpoint]]:
        """The records as they are, for assertions: not counted in :attr:`calls`, unaffected by faults.

        Example:
            >>> InMemoryCheckpointStore().peek("ns", "hub", "$Default")
            ([], [])
        """
        key = key_of(fully_qualified_namespace, eventhub_name, consumer_group)
        with self._lock:
            ownership = list(self._ownership.get(key, {}).values())
            checkpoints = list(self._checkpoints.get(key, {}).values())
        return ownership, checkpoints

    # -- the verbs, synchronous, at a given time -------------------------------------------------------

    def _list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        with self._lock:
            self._enter("list_ownership")
            records = list(
                self._ownership.get(key_of(fully_qualified_namespace, eventhub_name, consumer_group), {}).values()
            )
        return [
            replace(
                o,
                fully_qualified_namespace=fully_qualified_namespace,
                eventhub_name=eventhub_name,
                consumer_group=consumer_group,
            )
            for o in records
        ]

    def _claim_ownership(self, ownerships: Iterable[Ownership], now: float) -> list[Ownership]:
        claims = list(ownerships)
        won: list[Ownership] = []
        with self._lock:
            self._enter("claim_ownership")
            for claim in claims:
                table = self._ownership.setdefault(record_key(claim), {})
                current = table.get(claim.partition_id.lower())
                expected = normalize_etag(claim.etag)
                if (current is None) != (expected is None):
                    continue
                if current is not None and current.etag != expected:
                    continue
                stored = replace(claim, etag=str(next(self._versions)), last_modified_time=now)
                table[claim.partition_id.lower()] = stored
                periods = self._periods.setdefault(record_key(claim), {})
                if current is None or current.owner_id != claim.owner_id or not claim.owner_id:
                    periods[claim.partition_id.lower()] = str(stored.etag)  # a new owner: a new period
                won.append(stored)
        return won

    def _update_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._lock:
            self._enter("update_checkpoint")
            self._checkpoints.setdefault(record_key(checkpoint), {})[checkpoint.partition_id.lower()] = checkpoint
            self._states.get(record_key(checkpoint), {}).pop(checkpoint.partition_id.lower(), None)

    def _fence(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        with self._lock:
            self._enter("fence")
            key, pid, etag = record_key(ownership), ownership.partition_id.lower(), normalize_etag(ownership.etag)
            current = self._ownership.get(key, {}).get(pid)
            if (
                current is None
                or current.owner_id != ownership.owner_id
                or current.etag != etag
                or not current.owner_id
            ):
                raise lost(ownership, "the record changed before the fence")
            self._periods.setdefault(key, {})[pid] = str(etag)
            checkpoint = self._checkpoints.get(key, {}).get(pid)
            state = self._states.get(key, {}).get(pid)
        if checkpoint is None:
            return None, None
        o = ownership
        return replace(
            checkpoint,
            fully_qualified_namespace=o.fully_qualified_namespace,
            eventhub_name=o.eventhub_name,
            consumer_group=o.consumer_group,
        ), state

    def _update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes | None) -> None:
        with self._lock:
            self._enter("update_checkpoint")
            etag = normalize_etag(ownership.etag)
            key, pid = record_key(ownership), ownership.partition_id.lower()
            current = self._ownership.get(key, {}).get(pid)
            if current is None or current.owner_id != ownership.owner_id or not ownership.owner_id:
                raise lost(ownership, f"owned by {current.owner_id if current else None!r}")
            if etag is None or self._periods.get(key, {}).get(pid) != etag:
                raise lost(ownership, "another period of ownership began")
            self._checkpoints.setdefault(record_key(checkpoint), {})[checkpoint.partition_id.lower()] = checkpoint
            states = self._states.setdefault(record_key(checkpoint), {})
            if state is None:
                states.pop(checkpoint.partition_id.lower(), None)  # a checkpoint without state drops it
            else:
                states[checkpoint.partition_id.lower()] = bytes(state)

    def _list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        with self._lock:
            self._enter("list_checkpoints")
            key = key_of(fully_qualified_namespace, eventhub_name, consumer_group)
            records = list(self._checkpoints.get(key, {}).values())
        return [
            replace(
                c,
                fully_qualified_namespace=fully_qualified_namespace,
                eventhub_name=eventhub_name,
                consumer_group=consumer_group,
            )
            for c in records
        ]

    # -- the contract: async verbs ---------------------------------------------------------------------

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        """Every ownership record of the consumer group."""
        return self._list_ownership(fully_qualified_namespace, eventhub_name, consumer_group)

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Compare-and-swap each record on its etag; return those won, stamped with ``clock()``."""
        return self._claim_ownership(ownerships, self._clock())

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint of one partition, overwriting the previous one."""
        self._update_checkpoint(checkpoint)

    async def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        """Store several checkpoints (one call of ``update_checkpoint`` each, for the counters)."""
        for checkpoint in checkpoints:
            self._update_checkpoint(checkpoint)

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """Every checkpoint of the consumer group."""
        return self._list_checkpoints(fully_qualified_namespace, eventhub_name, consumer_group)

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        """Begin the period named by ``ownership`` (its record's current version); the partition's checkpoint."""
        return self._fence(ownership)[0]

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        """Store the checkpoint if ``ownership``'s period is still current (else ``OwnershipLostError``)."""
        self._update_checkpoint_fenced(checkpoint, ownership, None)

    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        """:meth:`fence`, with the state committed with the checkpoint (None when it was written without)."""
        return self._fence(ownership)

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        """Store the checkpoint and ``state`` together if ``ownership``'s period is current (one lock)."""
        self._update_checkpoint_fenced(checkpoint, ownership, state)

    # -- the same verbs as one-shot Observables, for tests and scripts ----------------------------------

    def observe_list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> Observable[list[Ownership]]:
        """:meth:`list_ownership` as a one-shot Observable (``.run()`` it in a test to peek through the contract).

        Example:
            >>> store = InMemoryCheckpointStore()
            >>> store.observe_list_ownership("ns", "hub", "$Default").run()
            []
        """
        return from_coroutine(lambda: self.list_ownership(fully_qualified_namespace, eventhub_name, consumer_group))

    def observe_claim_ownership(self, ownerships: Iterable[Ownership]) -> Observable[list[Ownership]]:
        """:meth:`claim_ownership` as a one-shot Observable; under a scheduler, stamped with its time.

        Example:
            >>> from reactivex.testing import TestScheduler
            >>> from rxhubs import Ownership
            >>> scheduler, store, won = TestScheduler(), InMemoryCheckpointStore(), []
            >>> claim = store.observe_claim_ownership([Ownership("ns", "hub", "$Default", "0", "me")])
            >>> _ = scheduler.schedule_absolute(30.0, lambda *_: claim.subscribe(won.extend, scheduler=scheduler))
            >>> _ = scheduler.start()
            >>> won[0].last_modified_time
            30.0
        """
        claims = list(ownerships)
        return from_coroutine(lambda: self.claim_ownership(claims))

    def observe_update_checkpoint(self, checkpoint: Checkpoint) -> Observable[None]:
        """:meth:`update_checkpoint` as a one-shot Observable (emits None, then completes).

        Example:
            >>> from rxhubs import Checkpoint
            >>> store = InMemoryCheckpointStore()
            >>> store.observe_update_checkpoint(Checkpoint("ns", "hub", "$Default", "0", "80", 7)).run()
            >>> store.calls["update_checkpoint"]
            1
        """
        return from_coroutine(lambda: self.update_checkpoint(checkpoint))

    def observe_list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> Observable[list[Checkpoint]]:
        """:meth:`list_checkpoints` as a one-shot Observable.

        Example:
            >>> InMemoryCheckpointStore().observe_list_checkpoints("ns", "hub", "$Default").run()
            []
        """
        return from_coroutine(lambda: self.list_checkpoints(fully_qualified_namespace, eventhub_name, consumer_group))

    async def close(self) -> None:
        """Nothing to release; present so every store can be closed the same way."""

    async def __aenter__(self) -> InMemoryCheckpointStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        with self._lock:
            owned = sum(len(t) for t in self._ownership.values())
            checkpoints = sum(len(t) for t in self._checkpoints.values())
        return f"InMemoryCheckpointStore(ownership={owned}, checkpoints={checkpoints}, available={self.available})"
