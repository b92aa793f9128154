"""The first reads of fences that go out together, as two listings instead of two reads each (private).

A fence reads two blobs before it stamps: the ownership blob (is it still at the version handed over?) and the
checkpoint blob (where to start, and the etag to stamp). A consumer handed 16 partitions at once fences all 16
at once: 32 ``HEAD`` requests, each costing the consumer's event loop more CPU in the storage SDK's pipeline than
its round trip (and, on Azurite, a turn of its one thread). Fences that begin in the same turn of the event loop
share two listings instead, the consumer group's ownership blobs and its checkpoint blobs (one request each per
5,000 blobs, parsed as the rounds' listings are): the same blobs, read at the same moment, each with its current
etag and metadata, so every fence decides exactly what it would have decided from its own two reads.

Fewer than :data:`BATCH` fences read as before, as does a client whose listing cannot be sent this way. So do fewer
than one in :data:`LISTED_PER_READ` of the blobs a listing would return: listing 1,024 blobs with their metadata
cost Azurite's one thread 256 ms of CPU, 128 ``HEAD`` requests 332 ms (2.6 ms each), so two listings for a handful
of fences held every other request to the store up for half a second (at a stop of four consumers of 1,024
partitions, each survivor's fences of the partitions it claims came in batches of a claim call's 32 at most). The
number of blobs is what the last listing of the prefix returned (the rounds' ``list_ownership`` tells it too).

Example:
    >>> Seen({"ownerid": "a"}, "0x1", None).metadata
    {'ownerid': 'a'}
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rxhubs.stores._blob_listing import list_blobs

__all__ = ["BATCH", "LISTED_PER_READ", "FenceReads", "Seen"]

#: Fences beginning together that read through two listings (fewer read their blobs one by one).
BATCH = 3
#: Blobs listed that cost the service about one read: fences list only when they are at least that share of them.
LISTED_PER_READ = 8


@dataclass(frozen=True)
class Seen:
    """A blob as a listing showed it: what a fence reads from its ``HEAD`` (lower-cased metadata keys)."""

    metadata: dict[str, str]
    etag: str | None
    size: int | None


class FenceReads:
    """Collects the fences of one consumer group that begin in one turn of the loop, and lists for them."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], list[tuple[str, str, asyncio.Future[Any]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sizes: dict[str, int] = {}  # prefix -> blobs its last listing returned

    def saw(self, prefix: str, count: int) -> None:
        """A listing of ``prefix`` returned ``count`` blobs: what listing it for the fences would cost."""
        self._sizes[prefix] = count

    def size(self, prefix: str) -> int:
        """How many blobs the last listing of ``prefix`` returned (0: none seen)."""
        return self._sizes.get(prefix, 0)

    async def read(self, client: Any, prefixes: tuple[str, str], own_name: str, name: str
                   ) -> tuple[Seen | None, Seen | None] | None:
        """The ownership blob ``own_name`` and checkpoint blob ``name`` as listed with the other fences' blobs.

        ``prefixes``: the consumer group's ownership and checkpoint blobs' (what is listed).

        None: too few fences began with this one (or the client cannot list this way): read the two blobs
        directly. A failed listing raises what it raised (``AzureError``, ``OSError``) in every fence it served.
        """
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        waiting = self._waiting.setdefault(prefixes, [])
        if not waiting:
            loop.call_soon(self._flush, client, prefixes)
        waiting.append((own_name, name, answer))
        result: tuple[Seen | None, Seen | None] | None = await answer
        return result

    def _flush(self, client: Any, prefixes: tuple[str, str]) -> None:
        waiting = self._waiting.pop(prefixes, [])
        listed = max(self._sizes.get(prefix, 0) for prefix in prefixes)
        if len(waiting) < max(BATCH, listed // LISTED_PER_READ):
            for _, _, answer in waiting:
                if not answer.done():
                    answer.set_result(None)
            return
        task = asyncio.get_running_loop().create_task(self._list(client, prefixes, waiting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _list(self, client: Any, prefixes: tuple[str, str],
                    waiting: list[tuple[str, str, asyncio.Future[Any]]]) -> None:
        try:
            owners, checkpoints = await asyncio.gather(*(list_sized(client, prefix) for prefix in prefixes))
        except Exception as exc:
            for _, _, answer in waiting:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for prefix, blobs in zip(prefixes, (owners, checkpoints), strict=True):
            if blobs is not None:
                self.saw(prefix, len(blobs))
        for own_name, name, answer in waiting:
            if answer.done():  # abandoned (its caller's deadline)
                continue
            if owners is None or checkpoints is None:
                answer.set_result(None)
            else:
                answer.set_result((owners.get(own_name), checkpoints.get(name)))


async def list_sized(client: Any, prefix: str) -> dict[str, Seen] | None:
    """Every blob under ``prefix`` by name, as the fence reads it; None if the client cannot list this way."""
    listed = await list_blobs(client, prefix)
    if listed is None:
        return None
    return {name: Seen(metadata, etag, size) for name, metadata, etag, _, size in listed}
