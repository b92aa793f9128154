"""A consumer group's lag per partition, read from the hub and the store: events, and seconds behind the newest.

What ``rxhubs checkpoints`` shows, plus time: the lag in seconds is how much older the first event the group
has not finished is than the partition's newest event (0 when the group is caught up). It is found by reading
that one event (Event Hubs keeps no index by sequence number other than the partition itself), once per
checkpoint position: its time is remembered until the checkpoint moves.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rxhubs._models import PartitionProperties, Position
from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.stores import StoreLike, as_checkpoint_store
from rxhubs.transport._seek import first_sequence_number, read_one

__all__ = ["PartitionLag", "group_lag", "lag_json", "prometheus_text"]

log = logging.getLogger("rxhubs.operate")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition's lag for a consumer group.

    Attributes:
        partition_id: The partition.
        owner: Its owner (None: released or never claimed).
        checkpoint: The checkpoint's sequence number (None: none yet).
        last_enqueued: The partition's last sequence number (-1: never had an event).
        lag: Events after the checkpoint (the whole retained partition without one).
        lag_seconds: Seconds between the first event not done and the newest event (0.0 when caught up;
            None when that event could not be read).

    Example:
        >>> PartitionLag("0", "web-1", 40, 52, 12, 3.5).lag
        12
    """

    partition_id: str
    owner: str | None
    checkpoint: int | None
    last_enqueued: int
    lag: int
    lag_seconds: float | None


def _utc(moment: _dt.datetime) -> _dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.UTC)


class _Times:
    """Enqueued times of the first event not done, per (partition, sequence number), read once each."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, int], _dt.datetime | None] = {}

    async def of(self, hub: Any, group: str, partition_id: str, sequence_number: int) -> _dt.datetime | None:
        key = (partition_id, sequence_number)
        if key not in self.known:
            try:
                event = await read_one(hub, partition_id, group, Position.from_sequence_number(
                    sequence_number, inclusive=True), max_wait=5.0)
            except RxHubsError as exc:
                log.warning("lag: the enqueued time of event %d of partition %s could not be read: %s",
                            sequence_number, partition_id, exc)
                return None
            when = event.enqueued_time if event is not None and event.sequence_number == sequence_number else None
            self.known[key] = _utc(when) if when is not None else None
        return self.known[key]

    def keep(self, keys: Iterable[tuple[str, int]]) -> None:
        wanted = set(keys)
        self.known = {k: v for k, v in self.known.items() if k in wanted}


async def group_lag(
    hub: Any, store: StoreLike, consumer_group: str, *, read_group: str | None = None, times: Any = None
) -> list[PartitionLag]:
    """The lag of every partition of ``hub`` for ``consumer_group``, from ``store``'s checkpoints.

    ``read_group``: the consumer group used to read the one event per partition that gives the lag in seconds
    (default ``consumer_group``; give a group no exclusive reader uses if the service refuses that read).

    Example:
        >>> import asyncio
        >>> from rxhubs import Checkpoint
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> from rxhubs.testing import InMemoryEventHub
        >>> hub, store = InMemoryEventHub(partition_count=1), InMemoryCheckpointStore()
        >>> _ = hub.send([b"x"] * 5, partition_id="0")
        >>> _ = asyncio.run(store.update_checkpoint(Checkpoint(hub.fully_qualified_namespace, "telemetry",
        ...                                                    "$Default", "0", None, 1)))
        >>> rows = asyncio.run(group_lag(hub, store, "$Default"))
        >>> [(p.checkpoint, p.last_enqueued, p.lag, p.lag_seconds) for p in rows]
        [(1, 4, 3, 0.0)]
    """
    typed = as_checkpoint_store(store)
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    ids = [str(p) for p in await hub.get_partition_ids()]
    props: Sequence[PartitionProperties] = await asyncio.gather(*(hub.get_partition_properties(p) for p in ids))
    owners = {o.partition_id: o.owner_id for o in await typed.list_ownership(ns, name, consumer_group)}
    checkpoints = {c.partition_id: c.sequence_number for c in await typed.list_checkpoints(ns, name, consumer_group)}
    times = times if times is not None else _Times()
    group = read_group or consumer_group

    async def one(pid: str, prop: PartitionProperties) -> PartitionLag:
        checkpoint = checkpoints.get(pid)
        last = prop.last_enqueued_sequence_number
        first_not_done = max(checkpoint + 1 if checkpoint is not None else 0, first_sequence_number(prop))
        lag = 0 if prop.is_empty else max(0, last - first_not_done + 1)
        seconds: float | None = 0.0
        if lag > 0:
            when, newest = await times.of(hub, group, pid, first_not_done), prop.last_enqueued_time_utc
            seconds = None if when is None or newest is None else max(0.0, (_utc(newest) - when).total_seconds())
        return PartitionLag(pid, owners.get(pid) or None, checkpoint, last, lag, seconds)

    rows = list(await asyncio.gather(*(one(p, prop) for p, prop in zip(ids, props, strict=True))))
    times.keep((r.partition_id, (r.checkpoint if r.checkpoint is not None else -1) + 1) for r in rows)
    return rows


def worst_lag_seconds(rows: Sequence[PartitionLag]) -> float | None:
    """The group's time behind: the largest of the partitions' ``lag_seconds``, None when it is unknown.

    A partition that is behind but whose time could not be read makes the maximum unknown (its term could be the
    largest), so the result is None then, never the 0.0 of the partitions that are caught up: a scaler reading
    0.0 at a lag of 13 would take the group for caught up. No partition, or every one caught up: 0.0.

    Example:
        >>> worst_lag_seconds([PartitionLag("0", "a", 40, 52, 12, 3.5), PartitionLag("1", "a", 9, 9, 0, 0.0)])
        3.5
        >>> print(worst_lag_seconds([PartitionLag("0", "a", 40, 52, 12, None), PartitionLag("1", "a", 9, 9, 0, 0.0)]))
        None
    """
    seconds = [r.lag_seconds for r in rows]
    known = [s for s in seconds if s is not None]
    return None if len(known) < len(seconds) else max(known, default=0.0)


def lag_json(eventhub_name: str, consumer_group: str, rows: Sequence[PartitionLag], at: float | None = None,
             stalls: Mapping[str, int] | None = None) -> str:
    """The JSON form: totals at the top (for KEDA's ``metrics-api`` scaler, ``valueLocation: lag``), per partition.

    ``stalls``: partition -> dead paths this process noticed (:func:`~rxhubs.transport._liveness.stall_counts`);
    given, each partition and the top carry ``stalls``.

    Example:
        >>> text = lag_json("telemetry", "$Default", [PartitionLag("0", "a", 40, 52, 12, 3.5)], at=0)
        >>> json.loads(text)["lag"], json.loads(text)["partitions"]["0"]["lag_seconds"]
        (12, 3.5)
    """
    document = {
        "eventhub": eventhub_name,
        "consumer_group": consumer_group,
        "time": round(time.time() if at is None else at, 3),
        "lag": sum(r.lag for r in rows),
        "lag_seconds": worst_lag_seconds(rows),
        "partitions": {r.partition_id: {k: v for k, v in asdict(r).items() if k != "partition_id"} for r in rows},
    }
    if stalls is not None:
        document["stalls"] = sum(stalls.get(r.partition_id, 0) for r in rows)
        for r in rows:
            document["partitions"][r.partition_id]["stalls"] = stalls.get(r.partition_id, 0)  # type: ignore[index]
    return json.dumps(document)


def prometheus_text(eventhub_name: str, consumer_group: str, rows: Sequence[PartitionLag],
                    stalls: Mapping[str, int] | None = None) -> bytes:
    """The Prometheus text exposition (``prometheus_client`` writes it), one sample per partition per gauge.

    ``stalls`` (partition -> dead paths this process noticed) adds the counter ``rxhubs_receive_stalls_total``.

    Raises:
        ConfigurationError: ``prometheus-client`` is not installed (``pip install 'rxhubs[prometheus]'``).

    Example:
        >>> text = prometheus_text("telemetry", "$Default", [PartitionLag("0", "a", 40, 52, 12, 3.5)])
        >>> [line for line in text.decode().splitlines() if line.startswith("rxhubs_lag_events{")]
        ['rxhubs_lag_events{consumer_group="$Default",eventhub="telemetry",partition="0"} 12.0']
    """
    try:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:
        raise ConfigurationError("lag in Prometheus format needs prometheus-client: pip install 'rxhubs[prometheus]'"
                                 ) from exc
    labels = ["consumer_group", "eventhub", "partition"]

    def family(name: str, doc: str, value: Any) -> Any:
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        for r in rows:
            v = value(r)
            if v is not None:
                gauge.add_metric([consumer_group, eventhub_name, r.partition_id], float(v))
        return gauge

    class _Rows(Collector):
        def collect(self) -> Any:
            owner = GaugeMetricFamily("rxhubs_partition_owner", "1 per partition, labelled with its owner ('' if none)",
                                      labels=[*labels, "owner"])
            for r in rows:
                owner.add_metric([consumer_group, eventhub_name, r.partition_id, r.owner or ""], 1.0)
            yield owner
            yield family("rxhubs_checkpoint_sequence_number", "Sequence number of the checkpoint",
                         lambda r: r.checkpoint)
            yield family("rxhubs_last_enqueued_sequence_number", "Sequence number of the partition's newest event",
                         lambda r: r.last_enqueued)
            yield family("rxhubs_lag_events", "Events after the checkpoint", lambda r: r.lag)
            yield family("rxhubs_lag_seconds", "Seconds between the first event not done and the newest event",
                         lambda r: r.lag_seconds)
            if stalls is not None:
                counter = CounterMetricFamily("rxhubs_receive_stalls", "Dead paths noticed (idle timeout) by this "
                                              "process, per partition", labels=labels)
                for r in rows:
                    counter.add_metric([consumer_group, eventhub_name, r.partition_id], stalls.get(r.partition_id, 0))
                yield counter

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows())
    return bytes(generate_latest(registry))
