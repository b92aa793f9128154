"""Checkpoints whose offset a geo-replication promotion made stale: rewritten, same sequence number.

rxhubs resumes by sequence number, which a promotion carries over, so its own readers never mind. The official
processor (azure-eventhub 5.15) resumes from the checkpoint's **offset** when it has one, and after a promotion an
offset of the old segment is refused (``com.microsoft:georeplication:invalid-offset``): a group handed to it
would stop reading on every partition whose checkpoint was written before the promotion and not since (an idle
partition). So when rxhubs owns a partition whose checkpoint has a numeric offset while the partition's offsets
are in the geo-replicated (non-numeric) form, and the checkpoint is at the partition's last event (the idle
partition: nothing after it will bring a new checkpoint), it writes the checkpoint again with that event's offset
of the new segment, as the partition's properties report it (in its fenced period), beside the reads, unless the
pipeline wrote a checkpoint of its own meanwhile (looked up just before). The sequence number does not change:
nothing is read again or skipped, by anyone. A checkpoint behind the last event is left to the pipeline, whose
next checkpoint, of an event read after the promotion, carries a new offset. (The event itself cannot be read to
learn its offset: this consumer's own exclusive reader holds the partition.) The Go SDK's geo tests note that the
live service once reported a last-enqueued offset a reader could not start from; were that so, the official
processor would still refuse the rewritten checkpoint, and rxhubs (by sequence number) would not mind.

What it costs (:class:`GeoOffsets`, one per consumer): nothing on a Standard namespace, and no call of its own
until it knows. Whether the hub's offsets are geo-replicated is learned from what the consumer reads anyway: the
properties of a partition claimed from a checkpoint (``_start_check`` reads them beside the first reads), and the
first event whose offset is not a number (a promotion while it runs). Then each partition waiting with a numeric
checkpoint costs one properties read. A consumer that reads nothing and is only handed partitions (no check at a
handover) learns at its first event.

"""

from __future__ import annotations

import logging
from typing import Any

from reactivex import abc

from rxhubs._batch import EventBatch
from rxhubs._models import Checkpoint, PartitionProperties
from rxhubs._rx import from_coroutine
from rxhubs.balancing._session import PartitionSession
from rxhubs.stores import CheckpointStore, is_fenced

__all__ = ["GeoOffsets", "refresh_offset", "stale_offset"]

log = logging.getLogger("rxhubs.balancing")


def stale_offset(checkpoint: Checkpoint, props: PartitionProperties) -> bool:
    """Whether ``checkpoint``'s offset is a number while the partition's offsets are geo-replicated strings.

    Example:
        >>> props = PartitionProperties("hub", "0", 0, 9, "1:0:4096", None, False)
        >>> stale_offset(Checkpoint("ns", "hub", "$Default", "0", "896", 7), props)
        True
        >>> stale_offset(Checkpoint("ns", "hub", "$Default", "0", "1:0:896", 7), props)
        False
    """
    offset, latest = checkpoint.offset, props.last_enqueued_offset
    return bool(offset) and str(offset).isdigit() and not props.is_empty and not latest.lstrip("-").isdigit()


async def refresh_offset(
    hub: Any, store: CheckpointStore, session: PartitionSession, checkpoint: Checkpoint, props: PartitionProperties
) -> Checkpoint | None:
    """Rewrite ``checkpoint`` with its event's offset in the current segment when it is stale; the new one, or None."""
    if not stale_offset(checkpoint, props) or not session.owned:
        return None
    context = session.context
    if checkpoint.sequence_number != props.last_enqueued_sequence_number:
        # events after it are there to read: the pipeline's next checkpoint carries an offset of the new segment
        log.info("partition %s: its checkpoint's offset %s is from before a geo-replication promotion; the next"
                 " checkpoint replaces it", context.partition_id, checkpoint.offset)
        return None
    offset = props.last_enqueued_offset
    fresh = Checkpoint(checkpoint.fully_qualified_namespace, checkpoint.eventhub_name, checkpoint.consumer_group,
                       checkpoint.partition_id, offset, checkpoint.sequence_number)
    # the reads went on meanwhile: if the pipeline checkpointed since, its checkpoint is newer and fresh already
    stored = await store.list_checkpoints(fresh.fully_qualified_namespace, fresh.eventhub_name, fresh.consumer_group)
    now = next((c for c in stored if c.partition_id == fresh.partition_id), None)
    if not session.owned or now is None or now.sequence_number != checkpoint.sequence_number:
        return None
    if is_fenced(store) and session.period is not None:
        await store.update_checkpoint_fenced(fresh, session.period)
    else:
        await store.update_checkpoint(fresh)
    log.info("partition %s: checkpoint offset %s (before a geo-replication promotion) rewritten as %s, sequence"
             " number %d unchanged", context.partition_id, checkpoint.offset, offset, checkpoint.sequence_number)
    return fresh


def _geo(offset: str | None) -> bool:
    return bool(offset) and not str(offset).lstrip("-").isdigit()


class GeoOffsets:
    """One consumer's watch for checkpoints a promotion made stale (see the module): claims in, batches seen."""

    def __init__(self, hub: Any, store: CheckpointStore, scheduler: abc.SchedulerBase) -> None:
        self.hub, self.store, self.scheduler = hub, store, scheduler
        self.geo = False  # the hub's offsets are geo-replicated strings (learned, never asked for)
        self.waiting: dict[str, tuple[PartitionSession, Checkpoint]] = {}  # claimed from a numeric offset

    def claimed(self, session: PartitionSession, checkpoint: Checkpoint | None) -> None:
        """A partition gained from ``checkpoint``: checked once the hub's offsets are known to be geo-replicated."""
        if checkpoint is None or not checkpoint.offset or _geo(checkpoint.offset):
            self.waiting.pop(session.partition_id, None)
            return
        self.waiting[session.partition_id] = (session, checkpoint)
        if self.geo:
            self._check(session, checkpoint, None)

    def observed(self, session: PartitionSession, props: PartitionProperties) -> None:
        """The partition's properties, read at its claim anyway (``_start_check``): learn, and check it with them."""
        if not props.is_empty and _geo(props.last_enqueued_offset):
            self._learned()
        waiting = self.waiting.get(session.partition_id)
        if self.geo and waiting is not None and waiting[0] is session:
            self._check(session, waiting[1], props)

    def seen(self, batch: EventBatch) -> None:
        """A batch read: an offset that is not a number means a promotion happened; check what waits."""
        if not self.geo and batch.events and _geo(batch.events[0].offset):
            self._learned()

    def _learned(self) -> None:
        if self.geo:
            return
        self.geo = True
        for session, checkpoint in list(self.waiting.values()):
            self._check(session, checkpoint, None)

    def _check(self, session: PartitionSession, checkpoint: Checkpoint, known: PartitionProperties | None) -> None:
        pid = session.partition_id

        async def check() -> None:
            if not session.owned:
                return
            props = known or await self.hub.get_partition_properties(pid)
            await refresh_offset(self.hub, self.store, session, checkpoint, props)
            if self.waiting.get(pid, (None,))[0] is session:
                del self.waiting[pid]

        from_coroutine(check).subscribe(
            on_error=lambda e: log.debug("partition %s: checking its checkpoint's offset failed: %r", pid, e),
            scheduler=self.scheduler,
        )
