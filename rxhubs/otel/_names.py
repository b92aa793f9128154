"""The names rxhubs emits: OpenTelemetry messaging semantic conventions where they exist, ``rxhubs.*`` otherwise.

The messaging conventions (and their Azure Event Hubs part) are experimental; these follow the version the
OpenTelemetry Python packages pinned by ``rxhubs[otel]`` carry (``opentelemetry-semantic-conventions``
0.66b2), written out here so that only the API package is needed at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rxhubs._models import PartitionContext

__all__ = [
    "CHECKPOINT_AGE",
    "CONSUMED_MESSAGES",
    "ERRORS",
    "EVENTS_PROCESSED",
    "LAG",
    "OWNED_PARTITIONS",
    "OWNERSHIP_CHANGES",
    "PROCESS_DURATION",
    "RECEIVE_STALLS",
    "base_attributes",
]

# -- attributes (semantic conventions) ---------------------------------------------------------------------
SYSTEM: Final = "messaging.system"
SYSTEM_EVENTHUBS: Final = "eventhubs"
DESTINATION: Final = "messaging.destination.name"
CONSUMER_GROUP: Final = "messaging.consumer.group.name"
PARTITION_ID: Final = "messaging.destination.partition.id"
OPERATION_TYPE: Final = "messaging.operation.type"
OPERATION_NAME: Final = "messaging.operation.name"
BATCH_COUNT: Final = "messaging.batch.message_count"
CLIENT_ID: Final = "messaging.client.id"
ENQUEUED_TIME: Final = "messaging.eventhubs.message.enqueued_time"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

# -- attributes (rxhubs) -------------------------------------------------------------------------------------
FIRST_SEQUENCE_NUMBER: Final = "rxhubs.batch.first_sequence_number"
LAST_SEQUENCE_NUMBER: Final = "rxhubs.batch.last_sequence_number"
ATTEMPT: Final = "rxhubs.attempt"
CHECKPOINT_SEQUENCE_NUMBER: Final = "rxhubs.checkpoint.sequence_number"
CHECKPOINT_OFFSET: Final = "rxhubs.checkpoint.offset"
OWNERSHIP_CHANGE: Final = "rxhubs.ownership.change"
OWNERSHIP_STOLEN: Final = "rxhubs.ownership.stolen"
OWNERSHIP_REASON: Final = "rxhubs.ownership.reason"

# -- metrics -------------------------------------------------------------------------------------------------
CONSUMED_MESSAGES: Final = "messaging.client.consumed.messages"
PROCESS_DURATION: Final = "messaging.process.duration"
EVENTS_PROCESSED: Final = "rxhubs.events.processed"
LAG: Final = "rxhubs.partition.lag"
CHECKPOINT_AGE: Final = "rxhubs.checkpoint.age"
OWNED_PARTITIONS: Final = "rxhubs.partitions.owned"
OWNERSHIP_CHANGES: Final = "rxhubs.ownership.changes"
ERRORS: Final = "rxhubs.errors"
RECEIVE_STALLS: Final = "rxhubs.receive.stalls"

#: The semantic conventions' advice for ``messaging.process.duration`` (seconds).
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def server(namespace: str) -> dict[str, str | int]:
    """``server.address`` (and ``server.port`` when the namespace carries one, as an emulator's does).

    Example:
        >>> server("ns.servicebus.windows.net"), server("127.0.0.1:5672")
        ({'server.address': 'ns.servicebus.windows.net'}, {'server.address': '127.0.0.1', 'server.port': 5672})
    """
    host, _, port = namespace.rpartition(":")
    if host and port.isdigit():
        return {SERVER_ADDRESS: host, SERVER_PORT: int(port)}
    return {SERVER_ADDRESS: namespace} if namespace else {}


def base_attributes(context: PartitionContext, operation: str | None = None) -> Mapping[str, str | int]:
    """The attributes every span and measurement of one partition (or, with ``partition_id ""``, group) has.

    Example:
        >>> attributes = base_attributes(PartitionContext("ns", "telemetry", "$Default", "3"), "process")
        >>> attributes["messaging.destination.partition.id"], attributes["messaging.operation.name"]
        ('3', 'process')
    """
    attributes: dict[str, str | int] = {
        SYSTEM: SYSTEM_EVENTHUBS,
        DESTINATION: context.eventhub_name,
        CONSUMER_GROUP: context.consumer_group,
        **server(context.fully_qualified_namespace),
    }
    if context.partition_id:
        attributes[PARTITION_ID] = context.partition_id
    if operation is not None:
        attributes[OPERATION_NAME] = operation
    return attributes
