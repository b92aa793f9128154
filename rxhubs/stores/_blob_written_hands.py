"""The etags of hands' last writes, learnt from one listing of the checkpoint blobs (private).

A period that begins from a hand whose last write was still in flight (:data:`~rxhubs.stores._blob_hands.WRITING`)
knows the position but not the checkpoint blob's etag, so its first write reads the blob first: one ``HEAD`` per
partition. A consumer handed 128 partitions of 1,024 that way, and stopped before its first periodic checkpoint
(a rolling deployment; ``rxhubs bench scale --real`` stops four of eight consumers two intervals after they joined),
sent 128 ``HEAD`` requests beside its 128 final writes, on the stop's critical path: four leavers, 512 reads on
Azurite's one thread before any of them released a partition.

So the store learns those etags off that path: a listing of the consumer group's ownership blobs (a round's) made
once :data:`SETTLE` seconds (half the default interval) have passed since such hands were taken, while they are
still unwritten, also lists the group's checkpoint blobs (the two requests go out together). A blob that names the
handing period and holds the position the hand gave is at the etag of that last write: the period's first write is
``If-Match`` it, as after any hand that carried its etag (a write in between makes it fail and be examined as the
fence's writes are). A blob that shows anything else is left to the ``HEAD``. Each hand is looked for in at most
:data:`TRIES` listings, and the listing is made only when the hands waiting are at least one in
:data:`~rxhubs.stores._blob_fence_reads.LISTED_PER_READ` of the blobs listed (a listing of 1,024 blobs costs Azurite
about what 100 ``HEAD`` requests cost). A failed listing changes nothing: the writes read as before.

Example:
    >>> hands = WrittenHands()
    >>> for pid in "012":
    ...     hands.note(f"ns/hub/g/checkpoint/{pid}", 9, now=100.0)
    >>> prefix = "ns/hub/g/checkpoint/"
    >>> hands.due(prefix, now=101.0, listed=3), len(hands.due(prefix, now=111.0, listed=3))
    ([], 3)
    >>> hands.found(["ns/hub/g/checkpoint/0", "ns/hub/g/checkpoint/1"], {"ns/hub/g/checkpoint/0": 9})
    ['ns/hub/g/checkpoint/0']
"""

from __future__ import annotations

from rxhubs.stores._blob_fence_reads import BATCH, LISTED_PER_READ

__all__ = ["SETTLE", "TRIES", "WrittenHands"]

#: Seconds after a hand is taken (its period began) before a listing looks for its last write. The hand's write was
#: sent before the hand itself, so by then it has been in flight for longer (a handover of 896 partitions at once had
#: its final writes answered within 4 s on Azurite). It was an interval (10 s): a consumer handed 128 partitions of
#: 1,024 whose periods began 10 s after the hands (starting 128 partitions beside seven other consumers on two
#: cores) was stopped two intervals after it joined; its one round between found the hands 8-9.8 s old, listed
#: nothing, and its stop sent 128 ``HEAD`` requests before its final writes (``rxhubs bench scale --real``).
SETTLE = 5.0
#: Listings a hand is looked for in before its period's first write is left to read the blob.
TRIES = 2


class WrittenHands:
    """The checkpoint blobs whose period began from a hand of a write in flight, not written by it yet."""

    def __init__(self) -> None:
        #: checkpoint blob name -> (when the hand was taken, the sequence number it gave, listings it was looked for in)
        self._waiting: dict[str, tuple[float, int, int]] = {}

    def note(self, name: str, sequence_number: int, *, now: float) -> None:
        """A period began on checkpoint blob ``name`` from a hand of a write (of ``sequence_number``) in flight."""
        self._waiting[name] = (now, sequence_number, 0)

    def drop(self, name: str) -> None:
        """The period wrote (or read) the blob: its etag is known."""
        self._waiting.pop(name, None)

    def due(self, prefix: str, *, now: float, listed: int) -> list[str]:
        """The blobs under ``prefix`` to look for in a listing now (none: too few, too soon); ``listed``: its size."""
        names = [name for name, (at, _, _) in self._waiting.items()
                 if name.startswith(prefix) and now - at >= SETTLE]
        return names if len(names) >= max(BATCH, listed // LISTED_PER_READ) else []

    def found(self, names: list[str], listed: dict[str, int | None]) -> list[str]:
        """After a listing: those of ``names`` whose blob holds their hand's position, last written by its period.

        ``listed``: per blob name the listing showed written by the handing period, its sequence number. The others
        count a try (dropped after :data:`TRIES`).
        """
        matched = []
        for name in names:
            if name not in self._waiting:  # written meanwhile
                continue
            at, number, tries = self._waiting.pop(name)
            if name in listed and listed[name] == number:
                matched.append(name)
            elif tries + 1 < TRIES:
                self._waiting[name] = (at, number, tries + 1)
        return matched
