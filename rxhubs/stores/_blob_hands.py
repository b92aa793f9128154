"""Handing a partition over through the blob store: the hand in the ownership blob, and the recipient's start (private).

**A handover needs no stamp.** A consumer that hands a partition over (it drained it and wrote its final checkpoint;
the balancing loop calls :meth:`_Hands.note_handover`) names its period in the ownership blob it writes for the
recipient (``rxhubshandedby``), and from then on refuses every write of that period itself, as a stamp would make
the service refuse it. The recipient's fence, finding that key equal to the checkpoint blob's ``rxhubsfence``, knows
that the period that wrote the checkpoint last is over and wrote its last, so there is nothing to fence out: it
reads the position and stamps nothing (its first write carries its own key, ``If-Match`` the etag it read). Any
other writer in between (the official store, an older owner) shows as another key, and the fence stamps
(:mod:`rxhubs.stores._blob_fence`). On Azurite, whose one thread serves requests one at a time, that is one write
fewer per partition on the handover's critical path (16 writes when 16 partitions move at once).

**The hand carries the position.** The ownership blob written for the recipient also gives the checkpoint blob as
the handing period left it (``rxhubshandedat``: its etag, sequence number and offset), when that period wrote or
read it last through this store and it holds no state. A recipient whose own listing of the ownership blobs showed
that hand, at the version it now holds, starts from there with **no request at all**: its fence records the etag the
hand gives, and its first write is ``If-Match`` that etag, so any write in between (another writer, or a claim that
fenced the blob since) makes that write fail and be examined as the fence's writes are (another period's key: lost;
none, the official store's: the ownership blob decides). The check the listing made stands for the fence's ownership
check: a record taken over after it is caught by that first write. A hand seen without a position (state, an absent
blob, a store that did not write the checkpoint), or not seen at all, is fenced as usual.

**The hand carries a write in flight.** The handing period need not wait for its last checkpoint write to be
answered: the balancing loop releases the partition as soon as that write is sent (without state), and the hand
gives its position with ``-`` for the etag, which is not known yet (:meth:`_Hands.note_handover`'s ``final``). On
Azurite at 32 partitions that is one turn of a busy queue less between the old owner's last event and the release.
The recipient starts from the hand's position, with nothing cached for the blob, so its first write reads the blob's
etag first (the ``HEAD`` a cache miss costs; the blob names the handing period, so the ownership blob is read too:
it names the recipient), unless a listing of the checkpoint blobs after the hand showed that write landed
(:mod:`~rxhubs.stores._blob_written_hands`: one listing for many hands, off the first writes' path). A recipient
that did not list the hand reads it from the ownership blob at its fence, and takes the later of the blob's position
and the hand's (the handing period's last write may land after that read, or never: the recipient still starts
where the old owner stopped; a write that lands after the recipient's fails on its etag, and the handing period
writes nothing more).

**A release carries a hand too; its position counts only over its own period's blob.** A consumer that releases a
partition to no one (it stops, or several owners above their targets release rather than deal) drained it and wrote
its final checkpoint all the same, so the released record names its period as a hand to a recipient does. Whoever
claims the partition from the version its listing showed with that hand (the claim's compare-and-swap proves the
record was not written in between, and stands for the fence's ownership check) still reads the checkpoint blob at its
fence (one ``HEAD``), and stamps it only if another period wrote it last. A released record may lie unclaimed for
days, and a checkpoint blob written meanwhile by a person or a tool that claims nothing must be read, not overruled by
a position from before (``tests/faults/test_corrupt_records.py``): the release's position counts only when the blob
is absent or was written last by the period the release names. ``rxhubs checkpoints reset`` claims the records it
resets, which overwrites the hand. At a stop of four of eight consumers of 1,024 partitions that is 512 stamps and 512
reads of ownership blobs fewer on the survivors' claims (``rxhubs bench scale --real``). A claimant that did not list
the hand fences as before: its claim overwrote the record, hand and all. A consumer that releases a record handed to
it before it began a period on it (dealt one too many while another consumer was still starting) passes the hand it
listed on with the release (:meth:`_Hands._ownership_metadata`): when the handing period's last write has not landed,
the next owner still starts where that period stopped.

**That last write is refused once anyone else wrote the blob**, without the ownership check another period's key
makes a write do. It may wait long for its turn (85 s behind a handover's 896 final writes on a loaded Azurite), and
by then the handing owner may have claimed the partition again (the recipient stopped and released it): the ownership
blob named that owner, its new period had not fenced yet, the check passed, and the write put the checkpoint back
from the recipient's last position to the hand's (``rxhubs bench scale --real``, 1,024 partitions: 17 partitions,
13 events each read twice). A handed period never owns the partition again, so a write of it that finds another key
(or none: the official store's) is lost, whoever the ownership blob names.
"""

from __future__ import annotations

import time

from rxhubs._models import Checkpoint, Ownership
from rxhubs.stores._blob_written_hands import WrittenHands
from rxhubs.stores._common import normalize_etag, parse_offset, parse_sequence_number

__all__ = ["HANDED_AT_KEY", "HANDED_KEY", "WRITING", "blob_names", "checkpoint_of", "hand_position", "newer",
           "offset_text", "period_key"]

#: The ownership blob's metadata key naming the period that handed the partition over to the owner it names.
HANDED_KEY = "rxhubshandedby"
#: The ownership blob's metadata key giving the checkpoint blob as the handing period left it (etag, number, offset).
HANDED_AT_KEY = "rxhubshandedat"
#: Periods remembered as handed over (the oldest are forgotten first; each is one partition's, never reused).
_HANDED_KEPT = 4096
#: A hand's "etag" when the handing period's last write was still in flight.
WRITING = "-"


def period_key(ownership: Ownership) -> str:
    """The ``rxhubsfence`` value of ``ownership``'s period: its etag, a space, its owner id."""
    return f"{normalize_etag(ownership.etag)} {ownership.owner_id}"


def blob_names(o: Ownership, partition_id: str | None = None) -> tuple[str, str]:
    """The ownership and checkpoint blobs' names of ``o``'s partition (``partition_id``: ``""`` for the prefixes)."""
    prefix = f"{o.fully_qualified_namespace}/{o.eventhub_name}/{o.consumer_group}/".lower()
    pid = o.partition_id.lower() if partition_id is None else partition_id
    return prefix + "ownership/" + pid, prefix + "checkpoint/" + pid


class _Hands:
    """The hands of :class:`~rxhubs.stores.BlobCheckpointStore` (a mixin of its fencing, ``_FencedBlobWrites``)."""

    #: Per checkpoint blob: the period that saw it last, the etag it saw, and the position at that etag ("" when
    #: unknown or the blob holds state): ``"{etag} {sequence number} {offset}"``, what a hand carries.
    _fences: dict[str, tuple[str, str, str]]
    #: Periods handed over, each with the sequence number of the final write still allowed (in flight at the hand).
    _handed: dict[str, int | None]
    _hands: dict[tuple[str, str | None], tuple[str, str]]
    #: Hands listed, per ownership blob and version: the position, the handing period, the recipient.
    _hands_seen: dict[tuple[str, str], tuple[str, str, str]]
    #: Per checkpoint blob a period began from a hand of a write in flight: that period's key and the handing one's
    #: (its first write finds the handing period's key on the blob: no ownership check needed, as with an etag)
    _hand_writers: dict[str, tuple[str, str]]
    #: Per ownership blob, the handing period of the last hand a fence of this store began from (each is used once: a
    #: later listing that shows the same hand, before the recipient's renewal rewrites the blob, is not kept again)
    _hands_used: dict[str, str]
    #: Per ownership blob and version a claim won from a listed release: the released period and its position, if the
    #: release gave one (see :meth:`_released_by`)
    _releases_claimed: dict[tuple[str, str], tuple[str, str]]
    #: The blobs of ``_hand_writers`` whose etag a listing may show (:mod:`~rxhubs.stores._blob_written_hands`)
    _written_hands: WrittenHands

    def _init_hands(self) -> None:
        self._fences, self._handed, self._hands, self._hands_seen = {}, {}, {}, {}
        self._written_hands = WrittenHands()
        self._hand_writers, self._hands_used, self._releases_claimed = {}, {}, {}

    def note_handover(self, period: Ownership, record: Ownership, final: Checkpoint | None = None) -> None:
        """``period`` is over: its partition goes to the owner ``record`` names, in the next claim of ``record``.

        A release (``record`` names no owner) carries the hand to whoever claims the partition from it next.

        Called by the balancing loop once the partition drained and its final checkpoint was written, or sent:
        ``final`` is the position of a last write still in flight, which the hand then carries (the checkpoint
        blob's etag after it is not known yet: the recipient reads it before its first write). That claim names
        ``period`` in the ownership blob (:data:`HANDED_KEY`), so that the recipient's fence can skip its stamp;
        and from now on every write of ``period`` fails here, as the stamp would have made it fail at the service
        (but the write of ``final``, which may not have left yet: the recipient reads the blob before its own).

        Example:
            >>> from rxhubs.stores import BlobCheckpointStore
            >>> store = BlobCheckpointStore.from_connection_string("UseDevelopmentStorage=true", "checkpoints")
            >>> a = Ownership("ns", "hub", "$Default", "0", "a", etag="0x1")
            >>> store.note_handover(a, Ownership("ns", "hub", "$Default", "0", "b", etag="0x2"))
            >>> store._ownership_metadata(Ownership("ns", "hub", "$Default", "0", "b", etag="0x2"))
            {'ownerid': 'b', 'rxhubshandedby': '0x1 a'}
        """
        key = period_key(period)
        self._handed[key] = None if final is None else final.sequence_number
        while len(self._handed) > _HANDED_KEPT:
            del self._handed[next(iter(self._handed))]
        _, name = blob_names(period)
        seen = self._fences.get(name, ("", "", ""))
        if seen[0] == key and final is None:  # (the write of final, which may not have left yet, needs the etag)
            del self._fences[name]
        at = seen[2] if seen[0] == key else ""
        if final is not None and not at.endswith(f" {final.sequence_number} {offset_text(final)}"):
            at = f"{WRITING} {final.sequence_number} {offset_text(final)}"  # its write is in flight
        self._hands[(blob_names(record)[0], normalize_etag(record.etag))] = (key, at)

    def _ownership_metadata(self, claim: Ownership) -> dict[str, str]:
        """The ownership blob's metadata that ``claim`` writes: its owner, and the period handing it over, if any.

        A hand gives the checkpoint blob as that period left it too, when it knows it (:data:`HANDED_AT_KEY`).
        """
        metadata = {"ownerid": claim.owner_id}
        hand = self._hands.pop((blob_names(claim)[0], normalize_etag(claim.etag)), None)
        if hand is None and not claim.owner_id:  # a release of a record handed to this store's consumer, not begun
            seen = self._hands_seen.get((blob_names(claim)[0].lower(), str(normalize_etag(claim.etag))))
            if seen is not None and seen[2] and seen[1]:  # (a hand to a recipient): it goes on with the release
                hand = (seen[1], seen[0])
        if hand is not None:
            metadata[HANDED_KEY] = hand[0]
            if hand[1]:
                metadata[HANDED_AT_KEY] = hand[1]
        return metadata

    def _saw_ownership(self, name: str, etag: str | None, metadata: dict[str, str]) -> None:
        """A listing showed ownership blob ``name`` at ``etag``: keep the position it hands over, if it gives one."""
        at, owner = metadata.get(HANDED_AT_KEY), metadata.get("ownerid", "")
        if at and etag and self._hands_used.get(name.lower()) != metadata.get(HANDED_KEY, ""):
            self._hands_seen[(name.lower(), str(normalize_etag(etag)))] = at, metadata.get(HANDED_KEY, ""), owner
            while len(self._hands_seen) > _HANDED_KEPT:
                del self._hands_seen[next(iter(self._hands_seen))]

    def _renewed_hand(self, name: str, claim: Ownership, etag: str | None) -> None:
        """The recipient a listed hand names renewed that record (now at ``etag``): the hand holds for the new version.

        A recipient takes a record handed to it as handed only when it sees it within an interval of the hand (an
        older record naming it may be its own, expiring); otherwise its round renews the record first and fences it
        after that claim. The claim's compare-and-swap was from the version the listing showed, so nothing was
        written in between, and the hand is still the last word on where the handing period stopped; but the renewal
        rewrites the blob's metadata without it, and the fence, finding no hand, read the checkpoint blob. When the
        handing period's last write was still in flight (its turn among a handover's hundreds of final writes), that
        was the checkpoint before it: the fence stamped it, the late write was refused, and the events between were
        read twice (``rxhubs bench scale --real`` at 512 partitions). So the hand moves to the renewed version, and
        the fence after the claim starts from it (:meth:`_handed_start`).
        """
        seen = self._hands_seen.pop((name.lower(), str(normalize_etag(claim.etag))), None)
        if seen is not None and etag and claim.owner_id and seen[2] in ("", claim.owner_id):
            self._hands_seen[(name.lower(), str(normalize_etag(etag)))] = seen

    def _used_hand(self, own_name: str, hand_key: str) -> None:
        """A fence of this store began a period from the hand of ``hand_key``'s period on the blob ``own_name``."""
        self._hands_used[own_name.lower()] = hand_key
        while len(self._hands_used) > _HANDED_KEPT:
            del self._hands_used[next(iter(self._hands_used))]

    def _handed_start(self, own_name: str, name: str, ownership: Ownership) -> Checkpoint | None:
        """The position a hand this store listed gives ``ownership`` (None: none seen); its period begins there."""
        version = (own_name, str(normalize_etag(ownership.etag)))
        seen = self._hands_seen.pop(version, None)
        if seen is None:
            return None
        at, hand_key, recipient = seen
        self._used_hand(own_name, hand_key)
        if not recipient:  # a release: its hand names the period, the fence reads the blob (see the module)
            self._releases_claimed[version] = (hand_key, at)
            while len(self._releases_claimed) > _HANDED_KEPT:
                del self._releases_claimed[next(iter(self._releases_claimed))]
            return None
        etag = at.partition(" ")[0]
        checkpoint = hand_position(ownership, at)
        if checkpoint is None or not etag:  # malformed: the fence reads the blob
            return None
        if etag == WRITING:  # the handing period's last write was in flight: the first write reads the etag, and
            self._fences.pop(name, None)  # finds the handing period's key there: its own period follows that one
            if hand_key:
                self._hand_writers[name] = (period_key(ownership), hand_key)
                self._written_hands.note(name, checkpoint.sequence_number, now=time.monotonic())
        else:
            self._fences[name] = (period_key(ownership), etag, at)
        return checkpoint

    def _released_by(self, own_name: str, ownership: Ownership) -> tuple[str, str] | None:
        """The period that released the record ``ownership`` was claimed from, if this store listed its hand.

        With the position the release gave (``""``: none).
        """
        return self._releases_claimed.pop((own_name, str(normalize_etag(ownership.etag))), None)


def checkpoint_of(o: Ownership, metadata: dict[str, str]) -> Checkpoint | None:
    number = parse_sequence_number(metadata.get("sequencenumber"))
    valid, offset = parse_offset(metadata.get("offset"))
    if number is None or not valid:
        return None
    return Checkpoint(o.fully_qualified_namespace, o.eventhub_name, o.consumer_group, o.partition_id, offset, number)


def offset_text(checkpoint: Checkpoint) -> str:
    return "" if checkpoint.offset is None else str(checkpoint.offset)


def hand_position(o: Ownership, hand: str | None) -> Checkpoint | None:
    """The position a hand (:data:`HANDED_AT_KEY`: etag, sequence number, offset) gives, if it gives one.

    A malformed hand gives none (the fence then reads the checkpoint blob).

    Example:
        >>> o = Ownership("ns", "hub", "$Default", "0", "b")
        >>> hand_position(o, "- 9 90").sequence_number, hand_position(o, "0x1 x 90"), hand_position(o, None)
        (9, None, None)
    """
    if not hand:
        return None
    number, _, offset = hand.partition(" ")[2].partition(" ")
    return checkpoint_of(o, {"sequencenumber": number, "offset": offset})


def newer(stored: Checkpoint, handed: Checkpoint | None) -> Checkpoint:
    """The later of the checkpoint blob's position and the one the hand gives (the same period wrote both).

    Example:
        >>> a = Checkpoint("ns", "hub", "$Default", "0", "70", 7)
        >>> newer(a, Checkpoint("ns", "hub", "$Default", "0", "90", 9)).sequence_number, newer(a, None) is a
        (9, True)
    """
    return handed if handed is not None and handed.sequence_number > stored.sequence_number else stored
