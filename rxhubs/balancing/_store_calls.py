"""The balancing loop's conversation with the store: the calls it makes, each bounded by a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, TypeVar, cast

from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx import deadline
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._timing import BalancingSettings
from rxhubs.errors import StoreError
from rxhubs.stores import CheckpointStore, FencedCheckpointStore, is_stateful

__all__ = ["Cut", "Fenced", "StoreCalls"]

T = TypeVar("T")

#: What a fence read: the partition's checkpoint and the operator state committed with it (each None if none).
Fenced: TypeAlias = tuple[Checkpoint | None, bytes | None]

#: Records per ``claim_ownership`` call: a claim of more goes out as several calls, each bounded by the store
#: timeout on its own, so that one slow request among a large consumer's renewals fails 32 records at most (with the
#: blob store each record is a request of its own, and a consumer owning 1,024 partitions renews hundreds at once).
CLAIM_CHUNK = 32
#: Calls of one claim in flight at once (an HTTP client pools about 100 connections: more would only queue, and
#: time spent queued counts against each call's timeout).
CHUNKS_IN_FLIGHT = 3


class Cut:
    """A claim that may be cut short: once :attr:`event` is set, its calls not yet sent are not sent.

    Their records are unanswered (certainly not written) and listed in :attr:`records`. A steady round's renewals
    are cut when the group changes meanwhile (:meth:`PresenceWatch.during_claim
    <rxhubs.balancing._presence_watch.PresenceWatch.during_claim>`): the round that serves the change need not wait
    for hundreds of renewals, which the next round sends (each is renewed well before a third of its expiration).
    """

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.records: list[Ownership] = []


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
    ) -> tuple[list[Ownership], list[Ownership]]:
        """:meth:`claim`, and meanwhile the fence of each record ``handed`` to this consumer (a fenced store only).

        A handed record names this consumer already (its former owner wrote it so, and the listing that showed it
        gave its current etag), and the claim does not carry it: its fence needs no claim first. ``on_fenced`` gets
        each fence's outcome (checkpoint and state, or the exception) as soon as it is answered, while the claim
        may still be in flight; the claim's answer is returned, as :meth:`claim_partly` returns it. Concurrent under
        asyncio, the fences first in virtual time.
        """
        if current_stepper() is not None:
            await self._fence_each(handed, on_fenced)
            return await self.claim_partly(records)
        # the claim last, so that it names the operation; both answered before a failed claim raises
        fenced, won = await asyncio.gather(self._fence_each(handed, on_fenced), self.claim_partly(records),
                                           return_exceptions=True)
        for outcome in (won, fenced):
            if isinstance(outcome, BaseException):
                raise outcome
        return cast(tuple[list[Ownership], list[Ownership]], won)

    async def claim(self, records: Sequence[Ownership], *, at_once: bool = False) -> list[Ownership]:
        """Claim, renew or release ``records``; the records won (nothing to send: no call).

        ``at_once``: every call in flight together, not :data:`CHUNKS_IN_FLIGHT` at a time (a stopping consumer's
        final release: see :mod:`rxhubs.balancing._wind_down`).

        Raises what a call failed with if any record went unanswered (see :meth:`claim_partly`).
        """
        return (await self.claim_partly(records, whole=True, at_once=at_once))[0]

    async def claim_partly(
        self, records: Sequence[Ownership], *, whole: bool = False, cut: Cut | None = None, at_once: bool = False
    ) -> tuple[list[Ownership], list[Ownership]]:
        """Claim, renew or release ``records``: the records won, and those whose call failed (unanswered).

        Up to :data:`CLAIM_CHUNK` records go out in one ``claim_ownership`` call; more in several, at most
        :data:`CHUNKS_IN_FLIGHT` at once (one after another in virtual time), each bounded by the store timeout;
        a call whose turn comes once the claim has taken the store timeout is not sent (its records are unanswered),
        so a claim takes two store timeouts at most however many records it carries (a slow store made a claim of
        1,024 renewals take 32 / 3 timeouts, and the partitions expired before the round ended). Nor is one sent
        once ``cut`` is set (its records go to ``cut.records``, unanswered).
        A record left out of a call's answer was lost (another owner's, or changed meanwhile); a record whose call
        failed or timed out is unanswered: it may or may not have been written.

        Raises:
            Exception: What the first failed call raised, when no call succeeded (or, with ``whole``, when any
                failed, after every call ended).
        """
        if not records:
            return [], []
        chunks = [list(records[i : i + CLAIM_CHUNK]) for i in range(0, len(records), CLAIM_CHUNK)]
        outcomes: list[list[Ownership] | Exception] = []
        if current_stepper() is not None or len(chunks) == 1:
            for chunk in chunks:
                outcomes.append(await self._claim_call(chunk))
        else:
            gate = asyncio.Semaphore(len(chunks) if at_once else CHUNKS_IN_FLIGHT)
            loop = asyncio.get_running_loop()
            began = loop.time()

            async def one(chunk: list[Ownership]) -> list[Ownership] | Exception:
                async with gate:
                    if loop.time() - began >= self.timeout:  # a slow store: the rest waits for the next round
                        return StoreError(f"claim_ownership not sent: the claim took {self.timeout:.1f} s already")
                    if cut is not None and cut.event.is_set():  # the group changed: the next round sends it
                        cut.records.extend(chunk)
                        return StoreError("claim_ownership not sent: cut short")
                    return await self._claim_call(chunk)

            outcomes = list(await asyncio.gather(*(one(chunk) for chunk in chunks)))
        self.operation = "claim"
        failures = [o for o in outcomes if isinstance(o, Exception)]
        if failures and (whole or len(failures) == len(chunks)):
            raise failures[0]
        won = [r for o in outcomes if not isinstance(o, Exception) for r in o]
        unanswered = [r for chunk, o in zip(chunks, outcomes, strict=True) if isinstance(o, Exception) for r in chunk]
        return won, unanswered

    async def _claim_call(self, chunk: list[Ownership]) -> list[Ownership] | Exception:
        try:
            return await self._bounded("claim_ownership", "claim", lambda: self.store.claim_ownership(chunk))
        except Exception as exc:
            return exc

    async def claim_reading_checkpoints(
        self, records: Sequence[Ownership], on_read: Callable[[dict[str, Checkpoint]], None] | None = None
    ) -> tuple[list[Ownership], dict[str, Checkpoint] | None, list[Ownership]]:
        """:meth:`claim_partly`, and the checkpoints read meanwhile (None if that read failed: read them again after).

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
            won, unanswered = await self.claim_partly(records)
            return won, checkpoints, unanswered
        checkpoints, (won, unanswered) = await asyncio.gather(read(), self.claim_partly(records))  # (the claim's)
        return won, checkpoints, unanswered

    async def _bounded(self, verb: str, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        self.operation = operation
        try:
            async with deadline(self.timeout):
                return await call()
        except TimeoutError:
            raise StoreError(f"{verb} did not answer within {self.timeout:.1f} s") from None
