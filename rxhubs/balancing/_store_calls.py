"""The balancing loop's conversation with the store: the calls it makes, each bounded by a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, TypeVar, cast

from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx import deadline
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._planner import BalancingSettings
from rxhubs.errors import StoreError
from rxhubs.stores import CheckpointStore, FencedCheckpointStore, is_stateful

__all__ = ["Fenced", "StoreCalls"]

T = TypeVar("T")

#: What a fence read: the partition's checkpoint and the operator state committed with it (each None if none).
Fenced: TypeAlias = tuple[Checkpoint | None, bytes | None]


class StoreCalls:
    """The store calls of one consumer group, each bounded by ``store_timeout`` (else one interval).

    :attr:`operation` names the call in flight, or the last one made, as ``ErrorContext.operation`` reports it
    (``list`` or ``claim``): a failed round says which call failed.

    Args:
        store: The checkpoint store.
        group: ``(namespace, eventhub_name, consumer_group)``.
        presence_group: Where the consumers' presence records live.
        settings: The balancing settings (for the timeout).

    Example:
        >>> import asyncio
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> calls = StoreCalls(InMemoryCheckpointStore(), ("ns", "hub", "$Default"), "$Default/presence",
        ...                    BalancingSettings())
        >>> asyncio.run(calls.owners()), calls.operation
        ([], 'list')
    """

    def __init__(
        self,
        store: CheckpointStore,
        group: tuple[str, str, str],
        presence_group: str,
        settings: BalancingSettings,
    ) -> None:
        self.store = store
        self.group = group
        self.presence_group = presence_group
        self.timeout = settings.store_timeout or settings.load_balancing_interval
        self.operation = "list"

    async def owners(self) -> list[Ownership]:
        """The consumer group's ownership records."""
        ns, hub, group = self.group
        return await self._bounded("list_ownership", "list", lambda: self.store.list_ownership(ns, hub, group))

    async def presence(self) -> list[Ownership]:
        """The consumers' presence records."""
        ns, hub, _ = self.group
        return await self._bounded(
            "list_ownership", "list", lambda: self.store.list_ownership(ns, hub, self.presence_group)
        )

    async def owners_and_presence(self) -> tuple[list[Ownership], list[Ownership]]:
        """:meth:`owners` and :meth:`presence`, concurrent under asyncio (one after the other in virtual time)."""
        if current_stepper() is not None:
            return await self.owners(), await self.presence()
        owners, presence = await asyncio.gather(self.owners(), self.presence())
        return owners, presence

    async def checkpoints(self) -> dict[str, Checkpoint]:
        """The group's checkpoints, by partition id."""
        ns, hub, group = self.group
        listed = await self._bounded("list_checkpoints", "list", lambda: self.store.list_checkpoints(ns, hub, group))
        return {c.partition_id: c for c in listed}

    async def fence(self, records: Sequence[Ownership]) -> list[Fenced | Exception]:
        """Begin the period of each record just won (a fenced store only): its checkpoint and state, or what failed.

        A store that keeps operator state (``fence_with_state``) returns the state committed with the
        checkpoint from the same read; others return None for it. Concurrent under asyncio, one after the other
        in virtual time (where stores never wait anyway).
        """
        return await self._fence_each(records, None)

    async def _fence_each(
        self, records: Sequence[Ownership], on_fenced: Callable[[Ownership, Fenced | Exception], None] | None
    ) -> list[Fenced | Exception]:
        """:meth:`fence`; ``on_fenced`` gets each record's outcome as soon as it is answered."""
        store = self.store
        assert isinstance(store, FencedCheckpointStore)
        stateful = store if is_stateful(store) else None

        async def one(record: Ownership) -> Fenced | Exception:
            try:
                if stateful is not None:
                    result: Fenced | Exception = await self._bounded(
                        "fence", "list", lambda: stateful.fence_with_state(record)
                    )
                else:
                    result = await self._bounded("fence", "list", lambda: store.fence(record)), None
            except Exception as exc:
                result = exc
            if on_fenced is not None:
                on_fenced(record, result)
            return result

        if current_stepper() is None:
            return list(await asyncio.gather(*(one(r) for r in records)))
        return [await one(record) for record in records]

    async def claim_fencing(
        self,
        records: Sequence[Ownership],
        handed: Sequence[Ownership],
        on_fenced: Callable[[Ownership, Fenced | Exception], None],
    ) -> list[Ownership]:
        """:meth:`claim`, and meanwhile the fence of each record ``handed`` to this consumer (a fenced store only).

        A handed record names this consumer already (its former owner wrote it so, and the listing that showed it
        gave its current etag), and the claim does not carry it: its fence needs no claim first. ``on_fenced`` gets
        each fence's outcome (checkpoint and state, or the exception) as soon as it is answered, while the claim
        may still be in flight; the claim's answer is returned. Concurrent under asyncio, the fences first in
        virtual time.
        """
        if current_stepper() is not None:
            await self._fence_each(handed, on_fenced)
            return await self.claim(records)
        # the claim last, so that it names the operation; both answered before a failed claim raises
        fenced, won = await asyncio.gather(self._fence_each(handed, on_fenced), self.claim(records),
                                           return_exceptions=True)
        for outcome in (won, fenced):
            if isinstance(outcome, BaseException):
                raise outcome
        return cast(list[Ownership], won)

    async def claim(self, records: Sequence[Ownership]) -> list[Ownership]:
        """Claim, renew or release ``records`` in one call; the records won (nothing to send: no call)."""
        if not records:
            return []
        return await self._bounded("claim_ownership", "claim", lambda: self.store.claim_ownership(list(records)))

    async def claim_reading_checkpoints(
        self, records: Sequence[Ownership], on_read: Callable[[dict[str, Checkpoint]], None] | None = None
    ) -> tuple[list[Ownership], dict[str, Checkpoint] | None]:
        """:meth:`claim`, and the checkpoints read meanwhile (None if that read failed: read them again after).

        Concurrent under asyncio, the read first in virtual time. ``on_read`` gets the checkpoints as soon as they
        are read, while the claim may still be in flight.
        """

        async def read() -> dict[str, Checkpoint] | None:
            try:
                checkpoints = await self.checkpoints()
            except Exception:
                return None
            if on_read is not None:
                on_read(checkpoints)
            return checkpoints

        if current_stepper() is not None:
            checkpoints = await read()
            return await self.claim(records), checkpoints
        checkpoints, won = await asyncio.gather(read(), self.claim(records))  # (operation: the claim's)
        return won, checkpoints

    async def _bounded(self, verb: str, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        self.operation = operation
        try:
            async with deadline(self.timeout):
                return await call()
        except TimeoutError:
            raise StoreError(f"{verb} did not answer within {self.timeout:.1f} s") from None
