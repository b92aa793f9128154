"""A store written the way users write one for the Azure SDK's EventProcessor: sync methods, dict records."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from typing import Any


class DictBacking:
    """The shared state of several DictSdkStore instances (like one storage account)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ownership: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.checkpoints: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.versions = itertools.count(1)


class DictSdkStore:
    """Implements ``azure.eventhub.CheckpointStore``'s four methods (sync) on dicts, with etag compare-and-swap."""

    def __init__(self, backing: DictBacking | None = None) -> None:
        self.backing = backing or DictBacking()
        self.threads: set[str] = set()

    def _group(self, table: dict[tuple[str, str, str], dict[str, Any]], ns: str, hub: str, cg: str) -> dict[str, Any]:
        return table.setdefault((ns.lower(), hub.lower(), cg.lower()), {})

    def list_ownership(self, fully_qualified_namespace, eventhub_name, consumer_group, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        with self.backing.lock:
            group = self._group(self.backing.ownership, fully_qualified_namespace, eventhub_name, consumer_group)
            return [copy.deepcopy(r) for r in group.values()]

    def claim_ownership(self, ownership_list, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        won = []
        with self.backing.lock:
            for claim in ownership_list:
                group = self._group(
                    self.backing.ownership,
                    claim["fully_qualified_namespace"],
                    claim["eventhub_name"],
                    claim["consumer_group"],
                )
                current = group.get(claim["partition_id"])
                if claim.get("etag") is None:
                    if current is not None:
                        continue
                elif current is None or current.get("etag") != claim["etag"]:
                    continue
                record = dict(claim, etag=f"v{next(self.backing.versions)}", last_modified_time=time.time())
                group[claim["partition_id"]] = record
                won.append(copy.deepcopy(record))
        return won

    def update_checkpoint(self, checkpoint, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        with self.backing.lock:
            group = self._group(
                self.backing.checkpoints,
                checkpoint["fully_qualified_namespace"],
                checkpoint["eventhub_name"],
                checkpoint["consumer_group"],
            )
            group[checkpoint["partition_id"]] = dict(checkpoint)

    def list_checkpoints(self, fully_qualified_namespace, eventhub_name, consumer_group, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        with self.backing.lock:
            group = self._group(self.backing.checkpoints, fully_qualified_namespace, eventhub_name, consumer_group)
            return [copy.deepcopy(r) for r in group.values()]
