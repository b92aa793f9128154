"""The balancing decision as a pure function: who should own which partition, seen from one consumer.

:func:`plan` takes what one consumer knows at one moment (the ownership records of the consumer group, the
presence records, the partition ids, its own id, the time and the settings) and returns a :class:`Plan`:
which records to renew, which claimable partitions to claim, which to steal and which to hand over. It does
no I/O and keeps no state, so it is property-tested on its own (``tests/balancing``); the loop in
:mod:`rxhubs.balancing._loop` runs it every load-balancing interval against a real store.

The rules
---------
* A record is **live** when it names an owner and was renewed within ``ownership_expiration``
  (``last_modified_time + ownership_expiration >= now``, the official processor's test). A partition without
  a record, with a released record (``owner_id == ""``) or with an expired one is **claimable**.
* The **active owners** are the owners of live records, the owners of live presence records, and this
  consumer, but those **leaving**: a consumer that stops writes a leaving record, and hands its partitions to
  the others (:mod:`rxhubs.balancing._dealing`); its records are neither claimable nor stolen meanwhile (nor
  those of a consumer whose presence record is released: a listing of the records from before its last
  writes). With
  ``P`` partitions and ``N`` active owners, each owner's **target** is ``P // N`` (the floor) or ``P // N + 1``
  (the ceiling): the ``P % N`` owners that get the ceiling are those already holding at least the ceiling, then
  the others by owner id. The ranking does not move while owners claim up to their
  targets, so every consumer computes the same targets from the same records.
* **Handover (cooperation).** An owner holding more than its target hands the surplus over: the loop
  finishes the batches in flight, writes the checkpoint and releases the records (``owner_id = ""``).
  When nothing is claimable and no other cooperating owner is above its target, it **hands each record to
  its recipient** instead (:attr:`Plan.release_to`): the surplus is dealt out to the cooperating owners
  below target, in owner-id order, each getting as many as it lacks. With several owners above target, each
  would deal from its own listing at its own round, and one that dealt before a consumer joined sends
  partitions to the wrong recipients, who must pass them on (one more handover: three intervals); their
  releases are claimed instead, dealt out from the claimants' listings. A handed record is written with the
  recipient as owner, so the recipient starts reading as soon as it sees it, without a claim of its own (it
  renews the record from its next round on). A recipient that is gone by then leaves the record to expire,
  as a crashed owner would.
* **Claims.** The claimable partitions, in partition order, are dealt out to the owners below target in
  owner-id order, each taking as many as it lacks; a consumer claims its own share only. Consumers that
  see the same records therefore claim disjoint sets and their compare-and-swaps do not collide. Nobody
  claims beyond its target, hence never beyond the ceiling.
* **Stealing** is the fallback for peers that do not cooperate (owners without a presence record, e.g. the
  Azure SDK's processors): a consumer below the floor with nothing left to claim takes partitions from the
  non-cooperating owner holding the most, as long as that owner is above its target. Owners that stopped
  renewing need no stealing: their records expire and become claimable.
* **Awaiting a handover.** A consumer below its target with nothing left to claim or steal, while
  cooperating owners hold more than theirs, is *awaiting* (:attr:`Plan.awaiting`): those owners will release
  partitions for it. Its loop then lists the records a few times per interval and balances as soon as a
  release shows, instead of at its next round (up to one interval later).
* ``strategy="greedy"`` (default) moves everything at once: a consumer that joins an owner of 32
  partitions sees 16/16 within one interval and a fraction (one for the owner to see it and hand over, then
  the newcomer's next look at the records).
  ``strategy="balanced"`` claims, releases or steals at most one partition per interval.

Presence
--------
A consumer that owns nothing is invisible in the ownership records, so nobody would hand anything over to
it. Each rxhubs consumer therefore keeps a **presence record**: an ownership record whose partition id and
owner id are its owner id, renewed with its claims every interval and released when it stops. Presence
records live under the consumer group name plus :data:`PRESENCE_SUFFIX` (``"$Default$presence"``), not
under the consumer group itself, because the official processors (azure-eventhub 5.x,
``_eventprocessor/ownership_manager.py``, ``_balance_ownership``) treat every record they list as a
partition: an expired or released presence record would be "claimable" for them and an active one could be
chosen as a partition to steal, after which they would open a receiver on a partition that does not exist,
fail, release it and start again every cycle. The blob layout lists ``{ns}/{hub}/{group}/ownership/``, so
``{ns}/{hub}/{group}$presence/ownership/...`` is never listed by them, and ``$`` cannot appear inside a
real consumer group name. Records for partition ids that are not in the hub are ignored.

Example:
    >>> from rxhubs import Ownership
    >>> settings = BalancingSettings(load_balancing_interval=10.0, ownership_expiration=30.0)
    >>> records = [Ownership("ns", "hub", "$Default", str(p), "a", 100.0, "e") for p in range(4)]
    >>> newcomer = [Ownership("ns", "hub", "$Default$presence", "b", "b", 101.0, "p")]
    >>> plan(records, ["0", "1", "2", "3"], "a", 105.0, settings, presence=newcomer).release
    ('2', '3')
    >>> plan(records, ["0", "1", "2", "3"], "b", 105.0, settings, presence=newcomer).claim
    ()
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from rxhubs._models import Ownership
from rxhubs.balancing._dealing import gone_or_leaving, recipients
from rxhubs.balancing._timing import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, STRATEGIES, BalancingSettings, Strategy
from rxhubs.errors import ConfigurationError

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_EXPIRATION",
    "PRESENCE_SUFFIX",
    "STRATEGIES",
    "BalancingSettings",
    "Plan",
    "Strategy",
    "partition_sort_key",
    "plan",
    "presence_group",
]

log = logging.getLogger("rxhubs.balancing")

#: Presence records live under ``consumer_group + PRESENCE_SUFFIX``.
PRESENCE_SUFFIX = "$presence"


def presence_group(consumer_group: str) -> str:
    """The consumer-group key under which the presence records of ``consumer_group`` are kept.

    Example:
        >>> presence_group("$Default")
        '$Default$presence'
    """
    return consumer_group + PRESENCE_SUFFIX


def partition_sort_key(partition_id: str) -> tuple[int, int, str]:
    """Numeric partition ids in numeric order ("2" before "10"), others after them, by text."""
    return (0, int(partition_id), "") if partition_id.isdigit() else (1, 0, partition_id)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one consumer should do in one balancing round.

    Attributes:
        owner_id: The consumer the plan is for.
        renew: Its live records, to claim again with their etags (keeps them from expiring); they include
            partitions being handed over, which stay owned until released.
        claim: Claimable partitions to claim (etag of the existing record, or None for a new one).
        steal: Live records of non-cooperating owners to take over (with their etags).
        release: Partition ids to hand over gracefully (finish, checkpoint, then release).
        owners: The active owners, sorted.
        target: How many partitions this consumer should own.
        floor: ``partitions // owners``.
        ceiling: ``floor`` or ``floor + 1``.
        earliest_expiry: When the first live record (or presence record) of another owner expires if it is
            not renewed: a loop may balance again right after it, so a crashed consumer's partitions are taken
            over at its expiry rather than up to one interval later.
        awaiting: How many partitions this consumer still lacks after its claims and steals that cooperating
            owners above their targets will hand over to it: the loop looks for their release more often
            than once per interval until they arrive (see :mod:`rxhubs.balancing._loop`).
        release_expected: When the first of those owners balances next (its newest renewal plus one
            interval), so sees this consumer and begins the handover; None unless ``awaiting``.
        release_to: ``(partition id, recipient)`` for the partitions of ``release`` handed straight to a
            cooperating owner below its target; the others are released with no owner.
    """

    owner_id: str
    renew: tuple[Ownership, ...] = ()
    claim: tuple[Ownership, ...] = ()
    steal: tuple[Ownership, ...] = ()
    release: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    target: int = 0
    floor: int = 0
    ceiling: int = 0
    earliest_expiry: float | None = None
    awaiting: int = 0
    release_expected: float | None = None
    release_to: tuple[tuple[str, str], ...] = ()
    targets: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def claims(self) -> tuple[Ownership, ...]:
        """Every record to send to ``claim_ownership`` this round: renewals, claims and steals."""
        return self.renew + self.claim + self.steal

    @property
    def acquiring(self) -> tuple[str, ...]:
        """Partition ids this consumer does not own yet and tries to get (claims and steals)."""
        return tuple(o.partition_id for o in self.claim + self.steal)


def _newest(records: Iterable[Ownership], known: Collection[str]) -> dict[str, Ownership]:
    newest: dict[str, Ownership] = {}
    for record in records:
        if record.partition_id not in known:
            continue
        previous = newest.get(record.partition_id)
        if previous is None or (record.last_modified_time or 0.0) > (previous.last_modified_time or 0.0):
            newest[record.partition_id] = record
    return newest


def plan(
    ownerships: Iterable[Ownership],
    partition_ids: Sequence[str],
    owner_id: str,
    now: float,
    settings: BalancingSettings | None = None,
    *,
    presence: Iterable[Ownership] = (),
    releasing: Collection[str] = (),
    avoid: Collection[str] = (),
    group: tuple[str, str, str] = ("", "", ""),
) -> Plan:
    """Decide what ``owner_id`` claims, renews, steals and releases this round.

    Args:
        ownerships: The consumer group's ownership records as listed (records for partition ids not in
            ``partition_ids`` are ignored).
        partition_ids: The hub's partition ids.
        owner_id: This consumer.
        now: The time, in seconds since the epoch, on the clock the store stamps ``last_modified_time`` with.
        settings: Interval, expiration and strategy (default :class:`BalancingSettings()`).
        presence: The presence records (see the module docstring); live ones make their owners active and
            mark them as cooperating (never stolen from).
        releasing: This consumer's partitions already being handed over: still its own, renewed, but not
            counted towards its target, so they are not released twice.
        avoid: Partitions this consumer must neither claim, steal nor renew for now (a reader that failed,
            or was cut off by a reader with a higher owner level).
        group: ``(fully_qualified_namespace, eventhub_name, consumer_group)`` for records created by a claim.

    Returns:
        The :class:`Plan`.

    Raises:
        ConfigurationError: An empty ``owner_id``.

    Example:
        >>> p = plan([], ["0", "1", "2"], "me", 0.0, group=("ns", "hub", "$Default"))
        >>> [o.partition_id for o in p.claim], p.target, p.owners
        (['0', '1', '2'], 3, ('me',))
    """
    if not owner_id:
        raise ConfigurationError("owner_id must be a non-empty string")
    settings = settings or BalancingSettings()
    expiration = settings.ownership_expiration
    ids = list(dict.fromkeys(partition_ids))
    records = _newest(ownerships, set(ids))

    def live(record: Ownership) -> bool:
        lmt = record.last_modified_time
        return bool(record.owner_id) and lmt is not None and lmt + expiration >= now

    held: dict[str, list[str]] = {}
    claimable: list[str] = []
    for pid in ids:
        record = records.get(pid)
        if record is not None and live(record):
            held.setdefault(record.owner_id, []).append(pid)
        else:
            claimable.append(pid)
    cooperating = {p.owner_id for p in presence if live(p)}
    # stopping, handing theirs out (_dealing); or stopped, their presence record released while a records listing
    # answered before their last writes still names them
    leaving = gone_or_leaving(presence, now, expiration) - {owner_id}
    expiries = [
        r.last_modified_time + expiration
        for r in [*(records[pid] for pid in ids if pid in records), *presence]
        if live(r) and r.owner_id != owner_id and r.last_modified_time is not None
    ]
    owners = sorted((set(held) | cooperating | {owner_id}) - leaving)

    count = {o: len(held.get(o, ())) for o in owners}
    floor, extra = divmod(len(ids), len(owners))
    ceiling = floor + (1 if extra else 0)
    ranked = sorted(owners, key=lambda o: (0 if count[o] >= floor + 1 else 1, o))
    targets = {o: floor + (1 if i < extra else 0) for i, o in enumerate(ranked)}
    target = targets[owner_id]
    step = 1 if settings.strategy == "balanced" else len(ids) + 1

    avoided = set(avoid)
    releasing_set = set(releasing)
    mine = [pid for pid in held.get(owner_id, []) if pid not in avoided]
    renew = tuple(replace(records[pid], owner_id=owner_id) for pid in mine)
    keeping = sorted((pid for pid in mine if pid not in releasing_set), key=partition_sort_key)
    have = len(keeping)

    release: tuple[str, ...] = ()
    release_to: tuple[tuple[str, str], ...] = ()
    if have > target:
        surplus = min(have - target, step)
        release = tuple(keeping[-surplus:])
        # Straight to a recipient only when no other owner hands over meanwhile: each deals from its own listing, at
        # its own round, and a dealing made before a consumer joined would send partitions to the wrong recipients.
        alone = not any(o != owner_id and o in cooperating and count[o] > targets[o] for o in owners)
        if not claimable and alone:
            release_to = recipients(release, owner_id, owners, cooperating, count, targets)

    claim: list[Ownership] = []
    if have < target:
        # Deal the claimable partitions out to the owners below target, in owner-id order: everyone who sees
        # the same records computes the same shares, so claims do not collide.
        pool = sorted(claimable, key=partition_sort_key)
        offset = 0
        for owner in owners:
            lacking = (target - have) if owner == owner_id else targets[owner] - count[owner]
            if lacking <= 0:
                continue
            lacking = min(lacking, step)
            if owner == owner_id:
                for pid in pool[offset : offset + lacking]:
                    if pid in avoided:
                        continue
                    existing = records.get(pid)
                    if existing is not None:
                        claim.append(replace(existing, owner_id=owner_id))
                    else:
                        claim.append(Ownership(*group, partition_id=pid, owner_id=owner_id))
                break
            offset += lacking

    steal: list[Ownership] = []
    after = have + len(claim)
    if after < floor and not claim:
        wanted = min(target - after, step)
        victims = sorted(
            (o for o in owners if o != owner_id and o not in cooperating and count[o] > targets[o]),
            key=lambda o: (-count[o], o),
        )
        for victim in victims:
            if wanted <= 0:
                break
            spare = count[victim] - targets[victim]
            candidates = sorted((p for p in held[victim] if p not in avoided), key=partition_sort_key)
            for pid in candidates[::-1][: min(spare, wanted)]:
                steal.append(replace(records[pid], owner_id=owner_id))
                wanted -= 1

    # Partitions cooperating owners above their targets will release, and this consumer will then claim.
    above = [o for o in owners if o in cooperating and o != owner_id and count[o] > targets[o]]
    awaiting = max(0, min(target - after - len(steal), sum(count[o] - targets[o] for o in above)))
    renewed = [max(records[pid].last_modified_time or 0.0 for pid in held[o]) for o in above]
    expected = min(renewed) + settings.load_balancing_interval if awaiting and renewed else None

    return Plan(
        owner_id=owner_id,
        renew=renew,
        claim=tuple(claim),
        steal=tuple(steal),
        release=release,
        owners=tuple(owners),
        target=target,
        floor=floor,
        ceiling=ceiling,
        earliest_expiry=min(expiries, default=None),
        awaiting=awaiting,
        release_expected=expected,
        release_to=release_to,
        targets=targets,
    )
