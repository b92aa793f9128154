"""The store contract's verbs over blobs: list and claim ownership, update and list checkpoints (private).

:class:`_BlobContract` is the part of :class:`~rxhubs.stores.BlobCheckpointStore` that reads and writes the
official layout: an ownership blob per partition (metadata ``ownerid``; a claim is a conditional metadata write
on its etag, or a create-only upload) and a checkpoint blob per partition (metadata ``offset`` and
``sequencenumber``). Listings read one prefix each; malformed blobs come back released or are skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import replace

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ResourceModifiedError,
    ResourceNotFoundError,
)

from rxhubs._models import Checkpoint, Ownership
from rxhubs.errors import RxHubsError
from rxhubs.stores._blob_client import (
    _code,
    recycling,
)
from rxhubs.stores._blob_fence import FENCE_KEY, STATE_KEY, _FencedBlobWrites, _seen, written_at
from rxhubs.stores._blob_fence_reads import list_sized
from rxhubs.stores._blob_listing import Under, partitions_under
from rxhubs.stores._common import describe, logger, normalize_etag, parse_offset, parse_sequence_number

__all__ = ["blob_prefix"]


def blob_prefix(fully_qualified_namespace: str, eventhub_name: str, consumer_group: str, kind: str) -> str:
    """``{namespace}/{hub}/{group}/{kind}/``, lower-cased, as the official store names its blobs."""
    return f"{fully_qualified_namespace}/{eventhub_name}/{consumer_group}/{kind}/".lower()


class _BlobContract(_FencedBlobWrites):
    """The four verbs of the contract (a mixin of :class:`~rxhubs.stores.BlobCheckpointStore`)."""

    async def _ensure_container(self) -> None:
        raise NotImplementedError

    async def _claim_one(self, claim: Ownership) -> Ownership | None:
        name = blob_prefix(claim.fully_qualified_namespace, claim.eventhub_name, claim.consumer_group, "ownership")
        blob = self._blob(name + claim.partition_id.lower())
        metadata = self._ownership_metadata(claim)
        etag = normalize_etag(claim.etag)
        try:
            if etag is None:
                properties = await self._create_only(blob, metadata)
            else:
                properties = await blob.set_blob_metadata(
                    metadata, etag=f'"{etag}"', match_condition=MatchConditions.IfNotModified
                )
        except (ResourceModifiedError, ResourceNotFoundError):
            properties = None  # changed since listed, or gone: the etag cannot match
        except (AzureError, OSError) as exc:
            raise self._error(exc, f"claim of partition {claim.partition_id!r}") from exc
        if properties is None:
            logger.debug(
                "blob store %s: claim of partition %r by %r lost", self._url, claim.partition_id, claim.owner_id
            )
            return None
        won = replace(claim, etag=normalize_etag(properties["etag"]), last_modified_time=written_at(properties))
        if etag is not None:
            self._renewed_hand(name + claim.partition_id.lower(), claim, won.etag)
        return won

    @recycling
    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        """Every ownership blob of the consumer group (one listing request); malformed ones come back released."""
        prefix = blob_prefix(fully_qualified_namespace, eventhub_name, consumer_group, "ownership")
        result: list[Ownership] = []
        checkpoints = blob_prefix(fully_qualified_namespace, eventhub_name, consumer_group, "checkpoint")
        written = self._written_hands.due(checkpoints, now=time.monotonic(), listed=self._fence_reads.size(prefix))
        if written:  # the etags of hands' last writes, beside the listing (_blob_written_hands)
            listed, _ = await asyncio.gather(self._list(prefix, "list_ownership"), self._learn(checkpoints, written))
        else:
            listed = await self._list(prefix, "list_ownership")
        for partition_id, metadata, etag, last_modified in listed:
            owner_id = metadata.get("ownerid")
            if owner_id is None:
                logger.warning(
                    "blob store %s: ownership blob %r has no 'ownerid' metadata; treating it as released",
                    self._url,
                    prefix + partition_id,
                )
                owner_id = ""
            group = (fully_qualified_namespace, eventhub_name, consumer_group)
            self._saw_ownership(prefix + partition_id, etag, metadata)  # a hand may carry its position
            result.append(Ownership(*group, partition_id, owner_id, last_modified, etag))
        self._fence_reads.saw(prefix, len(result))  # what a listing for the fences would cost
        return result

    async def _learn(self, prefix: str, names: list[str]) -> None:
        """List the checkpoint blobs under ``prefix``: the etags of ``names``' hands' last writes, where they landed."""
        try:
            blobs = await list_sized(self._client, prefix)
        except (AzureError, OSError) as exc:  # nothing changes: the first writes read the blobs
            logger.debug("blob store %s: listing the checkpoint blobs of hands failed: %s", self._url, exc)
            return
        if blobs is None:
            return
        by_hand = {}
        for name in names:
            seen, writers = blobs.get(name), self._hand_writers.get(name)
            if seen is not None and writers is not None and seen.metadata.get(FENCE_KEY) == writers[1] \
                    and STATE_KEY not in seen.metadata:
                by_hand[name] = parse_sequence_number(seen.metadata.get("sequencenumber"))
        for name in self._written_hands.found(names, by_hand):
            writers = self._hand_writers.get(name)
            if writers is not None and name not in self._fences:  # (a later fence's own read stands)
                self._fences[name] = _seen(writers[0], blobs[name].etag, blobs[name].metadata)

    @recycling
    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Compare-and-swap every record, all partitions concurrently; return those won.

        Raises:
            StoreError: Only when no claim was won and at least one failed for a reason other than losing
                (the store is unreachable, say); failures next to wins are logged and left out.
        """
        claims = list(ownerships)
        results = await asyncio.gather(*(self._claim_one(c) for c in claims), return_exceptions=True)
        won: list[Ownership] = []
        errors: list[BaseException] = []
        for result in results:
            if isinstance(result, Ownership):
                won.append(result)
            elif isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation and friends
                errors.append(result)
        if errors and not won:
            raise errors[0]
        for error in errors:
            logger.warning("%s", error)
        return won

    @recycling
    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Set the checkpoint blob's metadata, uploading the blob the first time."""
        name = (
            blob_prefix(
                checkpoint.fully_qualified_namespace, checkpoint.eventhub_name, checkpoint.consumer_group, "checkpoint"
            )
            + checkpoint.partition_id.lower()
        )
        blob = self._blob(name)
        metadata = {
            "offset": "" if checkpoint.offset is None else str(checkpoint.offset),
            "sequencenumber": str(int(checkpoint.sequence_number)),
        }
        try:
            try:
                await blob.set_blob_metadata(metadata)
            except ResourceNotFoundError:
                logger.info("blob store %s: uploading checkpoint blob %r (first checkpoint)", self._url, name)
                try:
                    await blob.upload_blob(b"", overwrite=True, metadata=metadata)
                except ResourceNotFoundError as exc:
                    if _code(exc) != ", ContainerNotFound":
                        raise
                    await self._ensure_container()
                    await blob.upload_blob(b"", overwrite=True, metadata=metadata)
        except RxHubsError:
            raise
        except (AzureError, OSError) as exc:
            raise self._error(exc, f"checkpoint of partition {checkpoint.partition_id!r}") from exc

    async def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        """Write several checkpoints concurrently (one request each); raises the first failure after all ran."""
        results = await asyncio.gather(*(self.update_checkpoint(c) for c in checkpoints), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    @recycling
    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """Every checkpoint blob of the consumer group (one listing request); malformed ones are skipped."""
        prefix = blob_prefix(fully_qualified_namespace, eventhub_name, consumer_group, "checkpoint")
        result: list[Checkpoint] = []
        for partition_id, metadata, _etag, _last_modified in await self._list(prefix, "list_checkpoints"):
            number = parse_sequence_number(metadata.get("sequencenumber"))
            valid, offset = parse_offset(metadata.get("offset"))
            if number is None or not valid:
                logger.warning(
                    "blob store %s: ignoring malformed checkpoint blob %r (offset %s, sequencenumber %s)",
                    self._url,
                    prefix + partition_id,
                    describe(metadata.get("offset")),
                    describe(metadata.get("sequencenumber")),
                )
                continue
            result.append(
                Checkpoint(fully_qualified_namespace, eventhub_name, consumer_group, partition_id, offset, number)
            )
        return result

    async def _list(self, prefix: str, verb: str) -> list[Under]:
        """``(partition id, lower-cased metadata, etag, last modified)`` of each blob right under ``prefix``."""
        try:
            found, foreign = await partitions_under(self._client, prefix)
        except ResourceNotFoundError as exc:
            if _code(exc) == ", ContainerNotFound":
                return []
            raise self._error(exc, verb) from exc
        except (AzureError, OSError) as exc:
            raise self._error(exc, verb) from exc
        for name in foreign:
            logger.warning("blob store %s: ignoring foreign blob %r under %r", self._url, name, prefix)
        return found
