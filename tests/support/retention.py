"""Simulated retention for the in-memory hub: drop a partition's oldest events, as the service's retention does."""

from __future__ import annotations

from rxhubs.testing import InMemoryEventHub


def expire(hub: InMemoryEventHub, partition_id: str, before: int) -> None:
    """Drop the events of ``partition_id`` with a sequence number below ``before`` (at least one is kept).

    Only for hubs without open receivers (their cursors are indices into the log).
    """
    partition = hub._partitions[partition_id]  # the fake's log: there is no public way to expire events
    keep = next(i for i, e in enumerate(partition.events) if e.sequence_number >= before)
    for name in ("events", "sequence_numbers", "offsets", "times"):
        setattr(partition, name, getattr(partition, name)[keep:])
