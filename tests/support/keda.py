"""A test oracle: KEDA's Azure Event Hubs scaler, ``checkpointStrategy: blobMetadata``, ported line by line.

Source: kedacore/keda (commit 8b4f083, 2026-08-20), ``pkg/scalers/azure/azure_eventhub_checkpoint.go``
(``blobMetadataCheckpointer.resolvePath``, ``getCheckpointFromStorageMetadata``), ``pkg/scalers/azure/
azure_eventhub.go`` (``getHubAndNamespace``, ``parseAzureEventHubConnectionString``) and
``pkg/scalers/azure_eventhub_scaler.go`` (``GetUnprocessedEventCountInPartition``,
``calculateUnprocessedEvents``, ``GetUnprocessedEventCountWithoutCheckpoint``,
``getTotalLagRelatedToPartitionAmount``, ``GetMetricsAndActivity``).

It reads what KEDA reads, with the clients KEDA's Go code mirrors: the partition properties from the official
azure-eventhub client, and one blob per partition (its metadata only) with azure-storage-blob. Nothing of
rxhubs is used, so it judges rxhubs' checkpoints from the outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.eventhub import EventHubConsumerClient
from azure.storage.blob import BlobServiceClient

MAX_INT64 = 2**63 - 1
#: ``stalePartitionInfoThreshold``'s default in KEDA.
STALE_THRESHOLD = 10_000


def _connection_value(connection_string: str, key: str) -> str:
    """getConnectionStringValue: the first ``key=value`` part whose key matches ``key`` ignoring case."""
    for part in connection_string.split(";"):
        k, sep, value = part.partition("=")
        if sep and k.strip().lower() == key.lower():
            return value
    return ""


def hub_and_namespace(connection_string: str) -> tuple[str, str]:
    """parseAzureEventHubConnectionString: ``Endpoint`` without ``sb://`` and ``/``, and ``EntityPath``, as typed."""
    namespace = _connection_value(connection_string, "Endpoint")
    namespace = namespace.removeprefix("sb://").removesuffix("/")
    name = _connection_value(connection_string, "EntityPath")
    if not namespace or not name:
        raise ValueError("can't parse event hub connection string. Missing eventHubNamespace or eventHubName")
    return namespace, name


def blob_path(namespace: str, hub: str, consumer_group: str, partition_id: str) -> str:
    """blobMetadataCheckpointer.resolvePath: only the consumer group is lower-cased."""
    return f"{namespace}/{hub}/{consumer_group.lower()}/checkpoint/{partition_id}"


def unprocessed(last: int, checkpoint: int, stale: int = STALE_THRESHOLD) -> int:
    """calculateUnprocessedEvents (Go's int64 arithmetic: Python's ints do not wrap, so none is needed here)."""
    if last >= checkpoint:  # noqa: SIM108 - the shape of the Go code, to compare line by line
        count = last - checkpoint
    else:
        count = (MAX_INT64 - checkpoint) + last
    if count > MAX_INT64 - stale:
        return 0
    return count


def without_checkpoint(beginning: int, last: int) -> int:
    """GetUnprocessedEventCountWithoutCheckpoint."""
    if (beginning == 0 and last == 0) or beginning != last:
        return (last - beginning) + 1
    return 0


def capped(total: int, partition_count: int, threshold: int) -> int:
    """getTotalLagRelatedToPartitionAmount (integer division, as Go's on int64)."""
    if total // threshold > partition_count:
        return partition_count * threshold
    return total


@dataclass
class KedaReading:
    """What KEDA would compute: per partition, the total, and the metric after the cap."""

    per_partition: dict[str, int]
    checkpoints: dict[str, int | None]
    total: int
    metric: int


def keda_lag(
    eventhub_connection_string: str,
    storage_connection_string: str,
    container: str,
    consumer_group: str,
    threshold: int = 64,
    stale: int = STALE_THRESHOLD,
) -> KedaReading:
    """GetMetricsAndActivity with ``checkpointStrategy: blobMetadata``."""
    namespace, name = hub_and_namespace(eventhub_connection_string)
    client = EventHubConsumerClient.from_connection_string(eventhub_connection_string, consumer_group=consumer_group)
    blobs = BlobServiceClient.from_connection_string(storage_connection_string)
    per: dict[str, int] = {}
    seen: dict[str, int | None] = {}
    try:
        ids = client.get_partition_ids()
        for pid in ids:
            info: dict[str, Any] = client.get_partition_properties(pid)
            last, beginning = info["last_enqueued_sequence_number"], info["beginning_sequence_number"]
            if last == -1:  # an empty partition
                per[pid], seen[pid] = 0, None
                continue
            blob = blobs.get_blob_client(container, blob_path(namespace, name, consumer_group, pid))
            try:
                metadata = blob.get_blob_properties().metadata
            except ResourceNotFoundError:  # BlobNotFound or ContainerNotFound: the whole retained partition
                per[pid], seen[pid] = without_checkpoint(beginning, last), None
                continue
            raw = metadata.get("sequencenumber", metadata.get("Sequencenumber"))
            if raw is None:
                raise ValueError("sequencenumber on blob not found")
            seen[pid] = int(raw)
            per[pid] = unprocessed(last, int(raw), stale)
    finally:
        client.close()
        blobs.close()
    total = sum(per.values())
    total = MAX_INT64 if total > MAX_INT64 else total
    return KedaReading(per, seen, total, capped(total, len(per), threshold))
