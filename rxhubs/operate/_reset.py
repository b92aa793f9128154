"""Reset a consumer group's positions, as ``kafka-consumer-groups --reset-offsets`` does: plan, then execute.

A reset writes, per partition, the checkpoint that makes every reader resume at the new position: rxhubs, the
official ``EventProcessorClient`` with the official blob store, and KEDA's ``blobMetadata`` scaler all read it.
A checkpoint marks the last event done, so "resume at sequence number S" is the checkpoint of event S - 1, with
that event's offset (the official processor starts from the offset). Resuming at the first retained event is
the checkpoint ``(first - 1, offset "-1")``: offset -1 is the start of the stream for the official processor,
and KEDA then counts the whole retained backlog, as it should.

Writes go through the fencing verbs on a fenced store: each partition is claimed by a reset owner
(``rxhubs-reset-...``), fenced, its checkpoint written in that period, and released. A former owner, even one
paused past its expiry that resumes later, can then never write its old position back: its period is over.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rxhubs._models import Checkpoint, Ownership, PartitionContext, PartitionProperties, Position
from rxhubs.errors import ConfigurationError, NotFoundError, OwnershipConflictError
from rxhubs.stores import CheckpointStore, StoreLike, as_checkpoint_store, is_fenced
from rxhubs.transport._seek import checkpoint_before, first_sequence_number, next_sequence_number, read_one, sequence_at

__all__ = ["ResetPlan", "ResetRow", "reset_positions"]

#: Ownership records renewed within this many seconds count as live owners (rxhubs' and .NET's default).
DEFAULT_EXPIRATION = 30.0
_RETRIES = 3

To = Literal["earliest", "latest"] | _dt.datetime


@dataclass(frozen=True, slots=True)
class ResetRow:
    """One partition of a reset.

    Attributes:
        partition_id: The partition.
        current: The stored checkpoint's sequence number (None: none yet).
        new: The checkpoint's sequence number after the reset (None: left as it is).
        skipped: Events the group skips (positive) or reads again (negative) by the reset; None without a
            checkpoint to compare with.
        note: Why a partition is left as it is, or was clamped.

    Example:
        >>> row = ResetRow("0", current=41, new=9, skipped=-32)
        >>> row.new + 1  # the sequence number the group resumes at
        10
    """

    partition_id: str
    current: int | None
    new: int | None
    skipped: int | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """What a reset does (or did, when ``executed``), per partition, and who owned the partitions.

    Example:
        >>> plan = ResetPlan("$Default", [ResetRow("0", 41, 9, -32)], {}, executed=False)
        >>> print(plan.format())
        partition     current         new  skipped (+) / replayed (-)
                0          41           9                         -32
    """

    consumer_group: str
    rows: list[ResetRow]
    live_owners: dict[str, list[str]] = field(default_factory=dict)
    executed: bool = False

    def format(self) -> str:
        """The table ``rxhubs checkpoints reset`` prints."""
        lines = [f"{'partition':>9} {'current':>11} {'new':>11}  {'skipped (+) / replayed (-)':>26}"]
        for r in self.rows:
            current = "-" if r.current is None else f"{r.current:,}"
            new = "-" if r.new is None else f"{r.new:,}"
            skipped = "-" if r.skipped is None else f"{r.skipped:+,}" if r.skipped else "0"
            line = f"{r.partition_id:>9} {current:>11} {new:>11}  {skipped:>26}"
            lines.append(f"{line}  {r.note}" if r.note else line)
        return "\n".join(lines)

    def owners_text(self) -> str:
        """``a (partitions 0, 2), b (partition 1)``: the live owners, for messages."""
        parts = []
        for owner, pids in sorted(self.live_owners.items()):
            parts.append(f"{owner} (partition{'s' if len(pids) > 1 else ''} {', '.join(pids)})")
        return ", ".join(parts)


def _count(pids: Sequence[str]) -> str:
    return f"partition{'s' if len(pids) > 1 else ''} {', '.join(pids)}"


async def _target(
    hub: Any, group: str, pid: str, props: PartitionProperties, current: int | None, to: To | None,
    shift_by: int | None, to_sequence: Mapping[str, int] | None,
) -> tuple[int | None, str]:
    """The sequence number the partition resumes at after the reset (None: left as it is), and a note."""
    first, nxt = first_sequence_number(props), next_sequence_number(props)
    if to == "earliest":
        return first, ""
    if to == "latest":
        return nxt, ""
    if isinstance(to, _dt.datetime):
        if props.is_empty:
            return nxt, ""
        oldest = await read_one(hub, pid, group, Position.earliest())
        if oldest is not None and oldest.enqueued_time is not None and to < _aware(oldest.enqueued_time):
            raise ConfigurationError(
                f"--to-datetime {to.isoformat()} is before the retention of partition {pid} (its first retained "
                f"event was enqueued at {_aware(oldest.enqueued_time).isoformat()}): use --to-earliest"
            )
        return await sequence_at(hub, pid, group, Position.from_enqueued_time(to, inclusive=True), props), ""
    if shift_by is not None:
        if current is None:
            return None, "no checkpoint to shift"
        wanted = current + 1 + shift_by
        clamped = min(max(wanted, first), nxt)
        return clamped, "" if clamped == wanted else "clamped to the retained events"
    assert to_sequence is not None
    if pid not in to_sequence:
        return None, ""
    wanted = to_sequence[pid]
    if not first <= wanted <= nxt:
        raise ConfigurationError(
            f"--to-sequence {pid}:{wanted} is outside partition {pid}'s retained events: give {first}..{nxt}"
        )
    return wanted, ""


def _aware(moment: _dt.datetime) -> _dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.UTC)


def _check_choice(to: To | None, shift_by: int | None, to_sequence: Mapping[str, int] | None) -> None:
    given = [name for name, value in (("to", to), ("shift_by", shift_by), ("to_sequence", to_sequence))
             if value is not None]
    if len(given) != 1:
        raise ConfigurationError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by and --to-sequence"
            + (f" (got {' and '.join(given)})" if given else "")
        )
    if to is not None and to not in ("earliest", "latest") and not isinstance(to, _dt.datetime):
        raise ConfigurationError(f"to must be 'earliest', 'latest' or a datetime, got {to!r}")
    if isinstance(to, _dt.datetime) and to.tzinfo is None:
        raise ConfigurationError(f"the time must carry its zone (2026-11-28T06:00:00Z), got {to.isoformat()}")
    if shift_by is not None and (isinstance(shift_by, bool) or not isinstance(shift_by, int)):
        raise ConfigurationError(f"shift_by must be an int, got {shift_by!r}")


async def reset_positions(
    hub: Any,
    store: StoreLike,
    consumer_group: str = "$Default",
    *,
    to: To | None = None,
    shift_by: int | None = None,
    to_sequence: Mapping[str, int] | None = None,
    partition_ids: Iterable[str] | None = None,
    execute: bool = False,
    force: bool = False,
    ownership_expiration: float = DEFAULT_EXPIRATION,
) -> ResetPlan:
    """Plan (and with ``execute``, write) new checkpoints for a consumer group, Kafka's ``--reset-offsets``.

    Give exactly one target: ``to="earliest"`` (the first retained event), ``to="latest"`` (only events enqueued
    from now on), ``to=datetime`` (the first event enqueued at or after it; a time before a partition's
    retention is refused), ``shift_by=N`` (N events forward, or back when negative, from each checkpoint;
    clamped to the retained events), or ``to_sequence={partition: S}`` (resume at sequence number S).

    Live owners (ownership renewed within ``ownership_expiration``) refuse an ``execute`` with
    :class:`~rxhubs.errors.OwnershipConflictError` naming them, unless ``force``: the reset then claims their
    partitions and fences them (a fenced store is needed), so their later checkpoint writes are refused.

    Raises:
        ConfigurationError: No target or several, a time without a zone or before the retention, a sequence
            number outside the retained events, ``force`` on a store that cannot fence.
        NotFoundError: An unknown partition.
        OwnershipConflictError: Live owners (without ``force``), or a partition claimed while the reset ran.

    Example:
        >>> import asyncio
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> from rxhubs.testing import InMemoryEventHub
        >>> hub, store = InMemoryEventHub(partition_count=1), InMemoryCheckpointStore()
        >>> _ = hub.send([b"x"] * 10, partition_id="0")
        >>> cp = Checkpoint(hub.fully_qualified_namespace, hub.eventhub_name, "$Default", "0", None, 7)
        >>> asyncio.run(store.update_checkpoint(cp))
        >>> plan = asyncio.run(reset_positions(hub, store, to="earliest", execute=True))
        >>> plan.rows
        [ResetRow(partition_id='0', current=7, new=-1, skipped=-8, note='')]
    """
    _check_choice(to, shift_by, to_sequence)
    typed = as_checkpoint_store(store)
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    all_ids = [str(p) for p in await hub.get_partition_ids()]
    wanted = list(partition_ids) if partition_ids is not None else None
    if to_sequence is not None:
        wanted = [*(wanted or []), *to_sequence]
    unknown = sorted(set(wanted or []) - set(all_ids))
    if unknown:
        raise NotFoundError(f"unknown {_count(unknown)} of {name}: it has {', '.join(all_ids)}")
    ids = [p for p in all_ids if wanted is None or p in wanted]
    props = dict(zip(ids, await asyncio.gather(*(hub.get_partition_properties(p) for p in ids)), strict=True))
    stored = {c.partition_id: c for c in await typed.list_checkpoints(ns, name, consumer_group)}
    rows: list[ResetRow] = []
    resume: dict[str, int] = {}
    for pid in ids:
        current = stored[pid].sequence_number if pid in stored else None
        at, note = await _target(hub, consumer_group, pid, props[pid], current, to, shift_by, to_sequence)
        if at is None:
            rows.append(ResetRow(pid, current, None, None, note))
            continue
        resume[pid] = at
        rows.append(ResetRow(pid, current, at - 1, None if current is None else at - 1 - current, note))
    owners = _live_owners(await typed.list_ownership(ns, name, consumer_group), set(resume), ownership_expiration)
    plan = ResetPlan(consumer_group, rows, owners)
    if not execute:
        return plan
    if owners and not force:
        raise OwnershipConflictError(
            f"consumer group {consumer_group} has live owners: {plan.owners_text()}; stop them first, or pass "
            "--force to fence them"
        )
    if owners and not is_fenced(typed):
        raise ConfigurationError(f"--force needs a store that fences; {type(typed).__name__} does not")
    checkpoints = [
        await checkpoint_before(hub, PartitionContext(ns, name, consumer_group, p), resume[p], props[p]) for p in resume
    ]
    await _write(typed, checkpoints)
    return ResetPlan(consumer_group, rows, owners, executed=True)


def _live_owners(records: list[Ownership], pids: set[str], expiration: float) -> dict[str, list[str]]:
    now = time.time()
    owners: dict[str, list[str]] = {}
    for o in records:
        renewed = o.last_modified_time
        if o.partition_id in pids and not o.is_released and renewed is not None and now - renewed < expiration:
            owners.setdefault(o.owner_id, []).append(o.partition_id)
    return {k: sorted(v, key=lambda p: (len(p), p)) for k, v in owners.items()}


async def _write(store: CheckpointStore, checkpoints: list[Checkpoint]) -> None:
    """Write each checkpoint; on a fenced store in a period of a reset owner's own, which ends former owners'."""
    if not is_fenced(store):
        for cp in checkpoints:
            await store.update_checkpoint(cp)
        return
    me = f"rxhubs-reset-{uuid.uuid4().hex[:8]}"
    first = checkpoints[0] if checkpoints else None
    if first is None:
        return
    ns, name, group = first.fully_qualified_namespace, first.eventhub_name, first.consumer_group
    todo = {cp.partition_id: cp for cp in checkpoints}
    for attempt in range(_RETRIES):
        records = {o.partition_id: o for o in await store.list_ownership(ns, name, group)}
        claims = [Ownership(ns, name, group, pid, me, etag=records[pid].etag if pid in records else None)
                  for pid in todo]
        won = await store.claim_ownership(claims)
        for record in won:
            await store.fence(record)
            await store.update_checkpoint_fenced(todo.pop(record.partition_id), record)
        await _release(store, ns, name, group, me)
        if not todo:
            return
        if attempt + 1 < _RETRIES:
            await asyncio.sleep(0.2 * (attempt + 1))  # an owner renewed meanwhile: its etag moved on
    raise OwnershipConflictError(
        f"{_count(sorted(todo))}: claimed by someone else while the reset ran; nothing written for "
        f"{'them' if len(todo) > 1 else 'it'} (the others were reset): run the reset again"
    )


async def _release(store: CheckpointStore, ns: str, name: str, group: str, me: str) -> None:
    mine = [o for o in await store.list_ownership(ns, name, group) if o.owner_id == me]
    if mine:
        await store.claim_ownership([Ownership(ns, name, group, o.partition_id, "", etag=o.etag) for o in mine])
