"""Fencing for the blob store: former owners' checkpoint writes fail, in the official layout (private).

Ownership and checkpoint are separate blobs, and Blob Storage has no transaction across two blobs, so the
fence is on the **checkpoint blob's etag**:

* every fenced write sets the checkpoint blob's metadata ``If-Match`` the etag this period last saw (its own
  last write, or its read at the fence), and names its period in one extra metadata key, ``rxhubsfence``
  (``"{ownership etag} {owner id}"``). The official store reads only ``offset`` and ``sequencenumber``, so it
  keeps reading and writing these blobs (its own writes drop the key: it does not fence);
* the new owner, right after its claim and before it reads where to start, re-writes the checkpoint blob
  as it is (same ``offset``/``sequencenumber``) with its own key, ``If-Match`` the etag it read
  (:meth:`_FencedBlobWrites.fence`). Every former owner's next conditional write then fails with 412; it
  re-reads, finds another period's key, and raises :class:`~rxhubs.errors.OwnershipLostError`;
* a write that finds another owner's key (or none: the official store, or a blob created before fencing)
  re-reads the ownership blob and writes only if that names the writer;
* **no checkpoint blob yet**: there is nothing to stamp (a blob without ``offset``/``sequencenumber`` would
  break the official store's listing), so the first write creates the blob without overwrite after checking
  the ownership blob. The window left: a former owner that never wrote a checkpoint for the partition,
  paused between that check and its upload, creates the blob once; the new owner's first write then finds
  its key, checks the ownership blob and overwrites it. The checkpoint may so show the former owner's
  position until the new owner's first write (nothing is lost: the new owner reads from its own start). The
  final write of a period that handed the partition over (the one its store still allows) creates the blob
  without that check: the ownership blob names the recipient by then, and the hand gave the recipient that very
  position, which the blob must keep if the recipient passes the partition on before writing.

The etag each period last saw is cached per checkpoint blob; a miss costs one read (a ``HEAD``).

**A handover needs no stamp**, and the hand carries the position: see :mod:`rxhubs.stores._blob_hands`.

**Operator state** (``commit_state``) is the checkpoint blob's **body**: one conditional upload replaces the
body and the metadata together (``offset``, ``sequencenumber``, ``rxhubsfence`` and ``rxhubsstate``, the
state's length), so the pair is atomic, and the official store, which reads only the metadata, still reads
the position. ``fence_with_state`` reads the metadata (one ``HEAD``, as ``fence``) and, when it names a state,
the body of that version (a ``GET`` conditional on the etag the ``HEAD`` saw). Any write of the metadata alone (a
checkpoint without state, by rxhubs or the official store) drops ``rxhubsstate``: the body is then not the
state of that checkpoint, and is ignored (the next state commit overwrites it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, ResourceModifiedError, ResourceNotFoundError

from rxhubs._models import Checkpoint, Ownership
from rxhubs.errors import RxHubsError, StoreError
from rxhubs.stores._blob_client import _Blob, _Recycling, recycling
from rxhubs.stores._blob_fence_reads import FenceReads
from rxhubs.stores._blob_hands import (
    HANDED_AT_KEY,
    HANDED_KEY,
    _Hands,
    blob_names,
    checkpoint_of,
    hand_position,
    newer,
    offset_text,
    period_key,
)
from rxhubs.stores._common import logger, lost, normalize_etag

__all__ = ["FENCE_KEY", "HANDED_AT_KEY", "HANDED_KEY", "STATE_KEY", "period_key", "written_at"]

#: The checkpoint blob's metadata key naming the period that wrote it.
FENCE_KEY = "rxhubsfence"
#: The checkpoint blob's metadata key saying its body is the state committed with it (the body's length).
STATE_KEY = "rxhubsstate"
#: Conditional writes tried before a fenced call gives up (a retriable StoreError: heavy contention).
_ATTEMPTS = 8
_ABSENT = ""  # the cached "etag" of a checkpoint blob that does not exist
_UNREAD = object()  # read(): no listing showed the blob; read it


class _FencedBlobWrites(_Hands, _Recycling):
    """The two fencing verbs of :class:`~rxhubs.stores.BlobCheckpointStore` (a mixin; the hands: :class:`_Hands`)."""

    _url: str
    _client: Any
    _fence_reads: FenceReads

    def _init_fencing(self) -> None:
        self._fence_reads = FenceReads()
        self._init_hands()

    def _blob(self, name: str) -> _Blob:
        raise NotImplementedError

    def _error(self, exc: BaseException, what: str) -> StoreError:
        raise NotImplementedError

    async def _create_only(self, blob: _Blob, metadata: dict[str, str], data: bytes = b"") -> dict[str, Any] | None:
        raise NotImplementedError

    @recycling
    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        """Begin ``ownership``'s period: stamp the checkpoint blob with it (same position); return the position.

        A hand this store listed at ``ownership``'s version gives the position without a request (see the module).

        Raises:
            OwnershipLostError: The ownership blob is not at ``ownership``'s version any more (after a hand this
                store listed, the period's first write finds that out instead).
            StoreError: The storage account failed (retriable), or the blob kept changing under the fence.
        """
        return (await self._fence(ownership, with_state=False))[0]

    @recycling
    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        """:meth:`fence`, reading the checkpoint blob's body too (one ``GET``): the position and its state."""
        return await self._fence(ownership, with_state=True)

    async def _fence(self, ownership: Ownership, *, with_state: bool) -> tuple[Checkpoint | None, bytes | None]:
        own_name, name = blob_names(ownership)
        key = period_key(ownership)
        if (handed := self._handed_start(own_name, name, ownership)) is not None:
            # the hand this store listed gave the position: nothing to read or stamp (and no state: a hand carries
            # a position only when the checkpoint blob holds none)
            return handed, None
        blob = self._blob(name)

        async def read(listed: Any = _UNREAD) -> tuple[Any, bytes] | None:
            """The checkpoint blob's properties and body (None: no blob); ResourceModifiedError: read it again.

            One ``HEAD`` (none when a listing showed the blob: ``listed``); the body only when it holds state (a
            ``GET`` of an empty blob is two requests: the ranged one the SDK starts with is refused), and only of
            the version that ``HEAD`` saw.
            """
            try:
                props = await blob.get_blob_properties() if listed is _UNREAD else listed
                if props is None:
                    return None
                if not (with_state and STATE_KEY in _metadata(props) and props.size):
                    return props, b""
                download = await blob.download_blob(
                    etag=f'"{normalize_etag(props.etag)}"', match_condition=MatchConditions.IfNotModified
                )
                return download.properties, await download.readall()
            except ResourceNotFoundError:
                return None

        released = self._released_by(own_name, ownership)
        try:
            own, reads = await self._first_reads(ownership, own_name, name, read, claimed_from_release=bool(released))
            # a release this store listed names the period, and its position counts only over a blob that period wrote
            # last, or none (a blob rewritten while the record lay released is read: see the module)
            released_by, released_at = released or ("", "")
            handed_by, hand = own.get(HANDED_KEY) or released_by, own.get(HANDED_AT_KEY) or released_at or None
            if handed_by:
                self._used_hand(own_name, handed_by)
            first: tuple[Any, bytes] | ResourceModifiedError | None = reads[1]
            for attempt in range(_ATTEMPTS):
                if attempt > 0 or isinstance(first, ResourceModifiedError):
                    try:  # changed between the chunks of a large body, or written meanwhile: read it again
                        first = await read()
                    except ResourceModifiedError:
                        continue
                # the handing period's last write may still be in flight (or have failed): its hand names it
                handed = hand_position(ownership, hand) if handed_by else None
                if first is None:
                    self._fences[name] = (key, _ABSENT, "")
                    return handed, None
                props, body = first
                metadata = _metadata(props)
                if released and metadata.get(FENCE_KEY) != handed_by:
                    handed = None
                checkpoint = checkpoint_of(ownership, metadata)
                if checkpoint is None:  # malformed: nothing valid to stamp; the first write checks the owner
                    self._fences.pop(name, None)
                    return handed, None
                if STATE_KEY not in metadata:  # (a hand gives no position with state)
                    checkpoint = newer(checkpoint, handed)
                    metadata_at = {**metadata, "sequencenumber": str(checkpoint.sequence_number),
                                   "offset": offset_text(checkpoint)}
                else:
                    metadata_at = metadata
                if handed_by and metadata.get(FENCE_KEY) == handed_by:  # written last by the period now over
                    self._fences[name] = _seen(key, props.etag, metadata_at)
                    return checkpoint, self._state_of(name, metadata, body, props.size) if with_state else None
                try:
                    written = await blob.set_blob_metadata(
                        {**metadata, FENCE_KEY: key},
                        etag=f'"{normalize_etag(props.etag)}"',
                        match_condition=MatchConditions.IfNotModified,
                    )
                except (ResourceModifiedError, ResourceNotFoundError):
                    continue  # written meanwhile (by the former owner): read it again and stamp that
                self._fences[name] = _seen(key, written["etag"], metadata_at)
                return checkpoint, self._state_of(name, metadata, body, props.size) if with_state else None
        except RxHubsError:
            raise
        except (AzureError, OSError) as exc:
            raise self._error(exc, f"fence of partition {ownership.partition_id!r}") from exc
        raise StoreError(
            f"blob store {self._url}: fence of partition {ownership.partition_id!r}: the checkpoint "
            f"blob changed {_ATTEMPTS} times in a row"
        )

    async def _first_reads(
        self, ownership: Ownership, own_name: str, name: str, read: Callable[..., Awaitable[Any]], *,
        claimed_from_release: bool
    ) -> tuple[dict[str, str], list[Any]]:
        """A fence's first reads: the ownership blob's metadata (its version checked), and ``[None, read()]``.

        ``read()``'s outcome is the checkpoint blob, or the ``ResourceModifiedError`` to read it again. The
        ownership check and the read go out together (with the other fences that begin now, as two listings:
        :class:`~rxhubs.stores._blob_fence_reads.FenceReads`); the stamp waits for both. A record
        ``claimed_from_release`` (one this store listed released, with the released period named) is not read: that
        claim's compare-and-swap was the ownership check, and a claim after it meets the stamp as after any check.
        """
        if claimed_from_release:
            try:
                return {}, [None, await read()]
            except ResourceModifiedError as exc:  # the body changed under the read: read it again
                return {}, [None, exc]
        seen = await self._fence_reads.read(self._client, blob_names(ownership, ""), own_name, name)
        if seen is not None:
            _check_version_of(seen[0], ownership)
            try:
                return _metadata(seen[0]), [None, await read(seen[1])]
            except ResourceModifiedError as exc:  # the body changed since the listing: read it again
                return _metadata(seen[0]), [None, exc]
        reads = await asyncio.gather(self._check_version(own_name, ownership), read(), return_exceptions=True)
        for outcome in reads:
            if isinstance(outcome, BaseException) and not isinstance(outcome, ResourceModifiedError):
                raise outcome
        return ({} if isinstance(reads[0], BaseException) else _metadata(reads[0])), list(reads)

    def _state_of(self, name: str, metadata: dict[str, str], body: bytes, size: int | None) -> bytes | None:
        if STATE_KEY in metadata:
            return body
        if size:
            logger.warning(
                "blob store %s: checkpoint blob %r was last written without state (by a pipeline without stateful"
                " operators, or the official store): its body is not the state of that checkpoint; ignoring it",
                self._url,
                name,
            )
        return None

    @recycling
    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        """Set the checkpoint blob's metadata ``If-Match`` the etag this period last saw.

        Raises:
            OwnershipLostError: Another period fenced the blob, or the ownership blob names another owner.
            StoreError: The storage account failed (retriable), or the blob kept changing under the write.
        """
        await self._write_fenced(checkpoint, ownership, None)

    @recycling
    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        """Upload ``state`` as the checkpoint blob's body with the checkpoint's metadata, ``If-Match`` as above."""
        await self._write_fenced(checkpoint, ownership, bytes(state))

    async def _write_fenced(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes | None) -> None:
        own_name, name = blob_names(ownership)
        key = period_key(ownership)
        if key in self._handed and self._handed[key] != checkpoint.sequence_number:
            raise lost(ownership, "this period handed the partition over")
        cached = self._fences.get(name)
        etag: str | None = cached[1] if cached is not None and cached[0] == key else None
        checked = False
        blob = self._blob(name)
        metadata = {
            "offset": "" if checkpoint.offset is None else str(checkpoint.offset),
            "sequencenumber": str(int(checkpoint.sequence_number)),
            FENCE_KEY: key,
        }
        if state is not None:
            metadata[STATE_KEY] = str(len(state))
        try:
            for _ in range(_ATTEMPTS):
                if etag is None:
                    try:
                        props = await blob.get_blob_properties()
                    except ResourceNotFoundError:
                        etag = _ABSENT
                    else:
                        writer = _metadata(props).get(FENCE_KEY)
                        if writer != key and self._hand_writers.get(name) != (key, writer):
                            if key in self._handed:  # its final write, and someone wrote since: see _Hands
                                raise lost(ownership, "this period handed the partition over, and the checkpoint"
                                           f" was written since (by {writer or 'a writer without fence'!r})")
                            await self._check_owner(own_name, ownership, writer)
                            checked = True
                        etag = str(normalize_etag(props.etag))
                if etag == _ABSENT:
                    # the first checkpoint of the partition: nothing was stamped, so the ownership blob decides; but
                    # not for the final write of a period that handed the partition over (the one write it allows):
                    # the blob names the recipient by then, and that write must land (see _Hands: the recipient may
                    # pass the partition on before it writes, and its next owner reads the blob)
                    if not checked and key not in self._handed:
                        await self._check_owner(own_name, ownership, None)
                        checked = True
                    written = await self._create_only(blob, metadata, state or b"")
                else:
                    condition: dict[str, Any] = {"etag": f'"{etag}"', "match_condition": MatchConditions.IfNotModified}
                    try:
                        if state is None:
                            written = await blob.set_blob_metadata(metadata, **condition)
                        else:  # body and metadata in one request: the pair is atomic
                            written = await blob.upload_blob(state, overwrite=True, metadata=metadata, **condition)
                    except (ResourceModifiedError, ResourceNotFoundError):
                        written = None
                if written is None:
                    etag = None  # someone wrote (or created, or deleted) it: read who
                    continue
                self._fences[name] = _seen(key, written["etag"], metadata)
                self._hand_writers.pop(name, None)
                self._written_hands.drop(name)
                return
        except RxHubsError:
            self._fences.pop(name, None)
            raise
        except (AzureError, OSError) as exc:
            raise self._error(exc, f"checkpoint of partition {checkpoint.partition_id!r}") from exc
        raise StoreError(
            f"blob store {self._url}: checkpoint of partition {checkpoint.partition_id!r}: the "
            f"checkpoint blob changed {_ATTEMPTS} times in a row"
        )

    async def _check_version(self, own_name: str, ownership: Ownership) -> Any:
        """The ownership blob's properties; raise unless it is still at ``ownership``'s version (the fence's check)."""
        try:
            props = await self._blob(own_name).get_blob_properties()
        except ResourceNotFoundError:
            props = None
        _check_version_of(props, ownership)
        return props

    async def _check_owner(self, own_name: str, ownership: Ownership, writer: str | None) -> None:
        """Raise unless the checkpoint blob, last written by ``writer``'s period, may be overwritten by ours."""
        if writer is not None and writer.partition(" ")[2] == ownership.owner_id:
            raise lost(ownership, "a later period of the same owner fenced the checkpoint")
        try:
            props = await self._blob(own_name).get_blob_properties()
        except ResourceNotFoundError:
            raise lost(ownership, "its ownership blob is gone") from None
        owner = _metadata(props).get("ownerid")
        if owner != ownership.owner_id:
            raise lost(ownership, f"owned by {owner!r}")


def _check_version_of(props: Any, ownership: Ownership) -> None:
    """Raise unless the ownership blob read (``props``; None: gone) is at ``ownership``'s version and names it."""
    if props is None:
        raise lost(ownership, "its ownership blob is gone")
    owner = _metadata(props).get("ownerid")
    if normalize_etag(props.etag) != normalize_etag(ownership.etag) or owner != ownership.owner_id or not owner:
        raise lost(ownership, f"the ownership blob changed before the fence (owner {owner!r})")


def _seen(key: str, etag: Any, metadata: dict[str, str]) -> tuple[str, str, str]:
    """A ``_fences`` entry: period ``key`` saw the checkpoint blob at ``etag`` with ``metadata``."""
    tag = str(normalize_etag(etag))
    if STATE_KEY in metadata:  # a hand cannot carry the state: the recipient reads it
        return key, tag, ""
    return key, tag, f"{tag} {metadata.get('sequencenumber', '')} {metadata.get('offset', '')}"


def _metadata(props: Any) -> dict[str, str]:
    return {str(k).lower(): "" if v is None else str(v) for k, v in (props.metadata or {}).items()}


def written_at(properties: dict[str, Any]) -> float:
    """Seconds since the epoch of a write's answer (its ``last_modified``)."""
    return float(properties["last_modified"].timestamp())
