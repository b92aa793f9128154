"""Dealing partitions out to recipients: a round's surplus, and a stopping consumer's partitions (pure functions).

A handed record names its recipient, which starts reading as soon as its listing shows it, with no claim and, with
the blob store, no read of the checkpoint either (the hand carries the position). Two dealings make hands:

* **A round's surplus** (:func:`recipients`): an owner above its target, the only one (see the planner), deals its
  surplus out to the cooperating owners below theirs, in owner-id order, each as many as it lacks.
* **A stop** (:func:`stop_recipients`): a consumer that stops hands what it owns to the consumers that stay, rather
  than releasing it to whoever claims it. When four of eight consumers of 1,024 partitions stopped together, the four
  survivors claimed the 512 released records (512 writes, and 512 reads of checkpoint blobs by their fences) only
  after a round of their own had listed the releases: on Azurite the change took 2.0-2.7 intervals, of which the
  survivors' claims were the last 6-12 s (``rxhubs bench scale --real``). Handed, the partitions move with the
  leavers' own writes, which a release made anyway, and the survivors' round only lists and starts them.

**Who stays.** The consumers whose presence records are live, but this one and those **leaving**: a consumer that
begins to stop writes a leaving record beside its presence record (:func:`leaving_record`), so that others
stopping at the same time hand nothing to it. Its presence record goes on naming it until its last release (others
plan with it until then, and never steal from it); both are released together at the end.

**How many each.** Each stayer is owed what it lacks of its target among the stayers (the partitions of the hub
divided by their number, as the planner divides them), from the records the stopping consumer's last listing
showed: a list of places, each stayer's in a row. The other consumers leaving at the same time deal from the same
places, so each leaver takes evenly spaced places, from an offset of its own (its rank among the leavers): ``L``
leavers of ``d`` partitions each take, together, ``L * d`` evenly spaced places, none twice. Four leavers of 128
partitions each give 32 to each of four stayers, and every stayer ends at its target. Partitions beyond what the
stayers lack are released to whoever claims them, as before; so is everything when nobody stays.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from rxhubs._models import Ownership

__all__ = ["LEAVING_SUFFIX", "gone_or_leaving", "leaving_owners", "leaving_record", "recipients", "stop_recipients"]

#: Appended to a consumer's owner id: the partition id of its leaving record, in the presence group.
LEAVING_SUFFIX = "$leaving"


def leaving_record(ns: str, hub: str, presence_group: str, owner_id: str, etag: str | None = None) -> Ownership:
    """The record that says ``owner_id`` is stopping (released with its presence record at the end of its stop).

    Example:
        >>> leaving_record("ns", "hub", "$Default$presence", "a").partition_id
        'a$leaving'
    """
    return Ownership(ns, hub, presence_group, owner_id + LEAVING_SUFFIX, owner_id, None, etag)


def _live(record: Ownership, now: float, expiration: float) -> bool:
    lmt = record.last_modified_time
    return bool(record.owner_id) and lmt is not None and lmt + expiration >= now


def leaving_owners(presence: Iterable[Ownership], now: float, expiration: float) -> set[str]:
    """The consumers whose live leaving record is among ``presence``.

    Example:
        >>> records = [Ownership("ns", "h", "g", "a", "a", 100.0), Ownership("ns", "h", "g", "b$leaving", "b", 100.0)]
        >>> leaving_owners(records, 101.0, 30.0), leaving_owners(records, 200.0, 30.0)
        ({'b'}, set())
    """
    return {p.owner_id for p in presence
            if p.partition_id == p.owner_id + LEAVING_SUFFIX and _live(p, now, expiration)}


def gone_or_leaving(presence: Iterable[Ownership], now: float, expiration: float) -> set[str]:
    """The consumers leaving (:func:`leaving_owners`) or gone (their presence record released) among ``presence``.

    Example:
        >>> records = [Ownership("ns", "h", "g", "a", "", 100.0), Ownership("ns", "h", "g", "b$leaving", "b", 100.0)]
        >>> sorted(gone_or_leaving(records, 101.0, 30.0))
        ['a', 'b']
    """
    presence = list(presence)
    return leaving_owners(presence, now, expiration) | {p.partition_id for p in presence if not p.owner_id}


def recipients(
    release: tuple[str, ...],
    owner_id: str,
    owners: Sequence[str],
    cooperating: Collection[str],
    count: dict[str, int],
    targets: dict[str, int],
) -> tuple[tuple[str, str], ...]:
    """Who gets each partition ``owner_id`` releases, when it is the only cooperating owner above target.

    The places the cooperating owners below target lack, in owner-id order, each as many as it lacks.

    Example:
        >>> count, targets = {"a": 4, "b": 0, "c": 0}, {"a": 2, "b": 1, "c": 1}
        >>> recipients(("2", "3"), "a", ["a", "b", "c"], {"a", "b", "c"}, count, targets)
        (('2', 'b'), ('3', 'c'))
    """
    places = [o for o in owners if o != owner_id and o in cooperating for _ in range(targets[o] - count[o])]
    return tuple(zip(release, places, strict=False))


def stop_recipients(
    partitions: Sequence[str],
    owner_id: str,
    records: Iterable[Ownership],
    presence: Iterable[Ownership],
    partition_count: int,
    now: float,
    expiration: float,
) -> dict[str, str]:
    """Who gets each of ``partitions`` (the stopping consumer's) when ``owner_id`` stops; the others are released.

    Args:
        partitions: The partitions to deal out, in the order to deal them.
        owner_id: The stopping consumer.
        records: The consumer group's ownership records (its last listing): what each stayer holds.
        presence: The presence records, listed now: who stays (live, not leaving, not ``owner_id``).
        partition_count: The hub's partitions: the stayers' targets are this divided among them.
        now: The time on the store's clock.
        expiration: The ownership expiration.

    Example:
        >>> def rec(pid, owner, group="g"):
        ...     return Ownership("ns", "h", group, pid, owner, 100.0)
        >>> records = [rec(str(p), "abcd"[p % 4]) for p in range(8)]
        >>> presence = [rec(o, o, "g$presence") for o in "abcd"] + [rec("d$leaving", "d", "g$presence")]
        >>> stop_recipients(["2", "6"], "c", records, presence, 8, 101.0, 30.0)  # d leaves too: a and b stay
        {'2': 'a', '6': 'b'}
        >>> stop_recipients(["2", "6"], "c", records, presence[2:], 8, 101.0, 30.0)  # only c and d: release
        {}
    """
    presence = list(presence)
    leaving = leaving_owners(presence, now, expiration)
    stayers = sorted({p.owner_id for p in presence
                      if p.partition_id == p.owner_id and _live(p, now, expiration)} - leaving - {owner_id})
    if not stayers or not partitions:
        return {}
    held = dict.fromkeys(stayers, 0)
    for record in records:
        if record.owner_id in held and _live(record, now, expiration):
            held[record.owner_id] += 1
    floor, extra = divmod(partition_count, len(stayers))
    ranked = sorted(stayers, key=lambda o: (0 if held[o] >= floor + 1 else 1, o))
    targets = {o: floor + (1 if i < extra else 0) for i, o in enumerate(ranked)}
    places = [o for o in stayers for _ in range(max(0, targets[o] - held[o]))]
    if not places:
        return {}
    dealt = min(len(partitions), len(places))
    # Spread over the places, each leaver from its own offset: leavers dealing as many partitions each from the same
    # listing take, together, evenly spaced places of the whole list, every place at most once (see the module).
    leavers = sorted(leaving | {owner_id})
    rank, n = leavers.index(owner_id), len(leavers)
    return {pid: places[(i * n + rank) * len(places) // (dealt * n)] for i, pid in enumerate(partitions[:dealt])}
