"""How the streaming source cuts what is available into Spark input partitions (sequence-number ranges)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from pyspark.sql.datasource import InputPartition

from rxhubs.transport._seek import first_sequence_number, next_sequence_number

__all__ = ["Offset", "SequenceRange", "first_sequence_number", "next_sequence_number", "split", "spread"]

#: Per partition id, the next sequence number to read (Spark's offset of this source).
Offset = dict[str, int]
#: The most pieces ``minPartitions`` cuts one partition's range into: Event Hubs allows 5 readers per partition
#: and consumer group, and one is left for other readers.
_MAX_PIECES = 4


class SequenceRange(InputPartition):
    """One Spark input partition: the events of one Event Hubs partition with ``start <= seq < end``.

    Example:
        >>> SequenceRange("0", 10, 20)
        SequenceRange(partition='0', start=10, end=20)
    """

    def __init__(self, partition: str, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SequenceRange(partition={self.partition!r}, start={self.start}, end={self.end})"


def spread(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int) -> Offset:
    """``latest`` capped so that at most ``max_rows`` events lie between ``start`` and it, shared fairly.

    Each partition gets an equal share; what a partition with less data leaves over goes to the others
    (water filling); leftover single events go to the partitions with the most data waiting.

    Example:
        >>> spread({"0": 0, "1": 0}, {"0": 100, "1": 3}, 10)
        {'0': 7, '1': 3}
    """
    waiting = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    take = dict.fromkeys(latest, 0)
    budget = max_rows
    open_ = sorted((p for p in waiting if waiting[p] > 0), key=lambda p: (waiting[p], p))
    while open_ and budget > 0:
        share = budget // len(open_)
        if share == 0:
            for p in sorted(open_, key=lambda p: (-(waiting[p] - take[p]), p))[:budget]:
                take[p] += 1
            budget = 0
            break
        remaining = []
        for p in open_:
            step = min(share, waiting[p] - take[p])
            take[p] += step
            budget -= step
            if take[p] < waiting[p]:
                remaining.append(p)
        open_ = remaining
    return {p: start.get(p, latest[p]) + take[p] for p in latest}


def split(ranges: list[SequenceRange], min_partitions: int | None) -> list[SequenceRange]:
    """``ranges`` cut into about ``min_partitions`` contiguous pieces, each range in proportion to its size.

    Nothing is cut when there are already that many ranges; every piece keeps at least one event, and one
    partition's range becomes at most 4 pieces (Event Hubs allows 5 readers per partition and consumer group).

    Example:
        >>> for piece in split([SequenceRange("0", 0, 60), SequenceRange("1", 100, 120)], 4):
        ...     print(piece)
        SequenceRange(partition='0', start=0, end=20)
        SequenceRange(partition='0', start=20, end=40)
        SequenceRange(partition='0', start=40, end=60)
        SequenceRange(partition='1', start=100, end=120)
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(size, _MAX_PIECES, round(size * min_partitions / total)))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        out += [SequenceRange(r.partition, a, b) for a, b in itertools.pairwise(bounds)]
    return out
