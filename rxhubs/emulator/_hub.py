"""An event hub: its partitions, consumer groups and routing, and the partition count it keeps when grown.

The partitions themselves (append-only logs, positions, reader rules) are :mod:`rxhubs.emulator._hubs`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from rxhubs.emulator._codec import Array, Timestamp
from rxhubs.emulator._geo import restamp
from rxhubs.emulator._hubs import Partition, now_ms
from rxhubs.emulator._partition_key import partition_for_key
from rxhubs.emulator._retention import Retention

__all__ = ["COUNT_FILE", "Hub"]

_LOG = logging.getLogger("rxhubs.emulator")

COUNT_FILE = "partition_count"  # in DATA_DIR/HUB: the count of a hub grown by add_partitions


class Hub:
    """An event hub: partitions, consumer groups, round-robin and partition-key routing."""

    def __init__(self, name: str, partition_count: int, consumer_groups: tuple[str, ...],
                 data_dir: Path | None, retention: Retention | None = None) -> None:
        self.name = name
        self.retention = retention or Retention()
        self.created_at_ms = now_ms()
        self.consumer_groups = frozenset(g.casefold() for g in ("$Default", *consumer_groups))
        self._dir = data_dir / name if data_dir is not None else None
        self.partitions: dict[str, Partition] = {}
        self._ids: list[str] = []
        self._next = 0
        self.segment = 0  # the namespace's replication segment (rxhubs.emulator._geo.Replication.apply)
        grown = self._stored_count()
        if grown > partition_count:
            _LOG.info("event hub %s: %d partitions (grown from %d while it ran before)", name, grown, partition_count)
        self.grow(max(partition_count, grown), record=False)
        if data_dir is not None:
            marker = data_dir / name / "created_at"
            try:
                self.created_at_ms = int(marker.read_text())
            except (OSError, ValueError):
                marker.write_text(str(self.created_at_ms))

    def _stored_count(self) -> int:
        """The partition count a grown hub recorded in its data directory (0: none recorded)."""
        if self._dir is None:
            return 0
        try:
            return int((self._dir / COUNT_FILE).read_text())
        except (OSError, ValueError):
            return 0

    def grow(self, partition_count: int, record: bool = True) -> None:
        """Add partitions up to ``partition_count`` (ids continue from the last).

        With a data directory and ``record``, the count is kept there: a restarted emulator has as many
        partitions, whatever its configuration says (a hub never shrinks, as in the service).

        Raises:
            OSError: The count could not be recorded (partitions added before the failure stay).
        """
        for i in range(len(self._ids), partition_count):
            pid = str(i)
            path = self._dir / f"{i}.log" if self._dir is not None else None
            self.partitions[pid] = Partition(self.name, pid, path, self.retention)
            self._ids.append(pid)
            if self.segment:
                restamp(self.partitions[pid], self.segment)
        if record and self._dir is not None and self._stored_count() < partition_count:
            self._dir.mkdir(parents=True, exist_ok=True)
            tmp = self._dir / (COUNT_FILE + ".tmp")
            tmp.write_text(str(partition_count))
            os.replace(tmp, self._dir / COUNT_FILE)

    @property
    def partition_count(self) -> int:
        return len(self._ids)

    def has_consumer_group(self, name: str) -> bool:
        """Whether the hub has this consumer group; the service ignores case in consumer group names."""
        return name.casefold() in self.consumer_groups

    def route(self, partition_key: str | None) -> Partition:
        """The partition an event sent to the hub goes to: by key, else round robin."""
        if partition_key is not None:
            return self.partitions[self._ids[partition_for_key(partition_key, len(self._ids))]]
        p = self.partitions[self._ids[self._next % len(self._ids)]]
        self._next += 1
        return p

    def properties(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": "com.microsoft:eventhub",
            "created_at": Timestamp(self.created_at_ms),
            "partition_count": len(self._ids),
            "partition_ids": Array(0xA1, list(self._ids)),
            "georeplication_factor": 2 if self.segment else 1,
        }

    def close(self) -> None:
        for p in self.partitions.values():
            p.close()
