"""The rxhubs exception tree.

Every error rxhubs raises derives from :class:`RxHubsError`. Each carries a ``retriable`` flag: ``True``
means trying the same thing again later may succeed (a dropped connection, a store outage), ``False``
means it will not until something changes (a bad connection string, an unknown partition). Errors from
azure-eventhub and azure-storage-blob are translated at the boundary and chained (``raise ... from exc``),
so the original is always on ``__cause__``.

::

    RxHubsError (retriable: per instance)
    ├── ConfigurationError            bad argument, malformed connection string, invalid position
    ├── NotFoundError                 unknown hub, partition or consumer group
    ├── AuthenticationError           the service refused the credentials
    ├── TransportError                transport failure (retriable)
    │   └── ReceiverClosedError       receive on a closed receiver (not retriable)
    ├── OwnershipLostError            the partition is another consumer's now (link cut off, or a fenced write)
    ├── QuotaExceededError            a service limit, e.g. more than 5 readers per partition
    ├── StoreError                    the checkpoint store failed (retriable by default)
    │   ├── OwnershipConflictError    a claim lost its compare-and-swap (etag mismatch)
    │   ├── CorruptRecordError        a stored record could not be parsed
    │   └── CheckpointOutOfRangeError a checkpoint outside the partition (a recreated hub, an expired position)
    ├── SinkError                     a sink (e.g. a Spark write) failed after its retries
    │   └── PublishError              events could not be published to a hub (names the source partition)
    ├── StateError                    operator state cannot be kept or restored (corrupt, changed, too big)
    ├── CaptureGapError               Capture files and the hub leave events out (names the sequence numbers)
    └── EmulatorError                 the local emulator could not start or serve

Messages never include secrets: connection strings are shown with their keys redacted.

Example:
    >>> from rxhubs.errors import ConfigurationError, RxHubsError
    >>> try:
    ...     raise ConfigurationError("max_count must be >= 1, got 0")
    ... except RxHubsError as exc:
    ...     (type(exc).__name__, exc.retriable)
    ('ConfigurationError', False)
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "CaptureGapError",
    "CheckpointOutOfRangeError",
    "ConfigurationError",
    "CorruptRecordError",
    "EmulatorError",
    "NotFoundError",
    "OwnershipConflictError",
    "OwnershipLostError",
    "PublishError",
    "QuotaExceededError",
    "ReceiverClosedError",
    "RxHubsError",
    "SinkError",
    "StateError",
    "StoreError",
    "TransportError",
]


class RxHubsError(Exception):
    """Root of every rxhubs error.

    Args:
        message: One line that says what went wrong and, where it helps, what to do.
        retriable: Whether the same call may succeed later. Defaults to the class's ``default_retriable``.
    """

    default_retriable: bool = False

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.retriable: bool = self.default_retriable if retriable is None else retriable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, retriable={self.retriable})"


class ConfigurationError(RxHubsError, ValueError):
    """A bad argument or setting: fix the call, retrying will not help."""


class NotFoundError(RxHubsError, LookupError):
    """An unknown event hub, partition or consumer group."""


class AuthenticationError(RxHubsError):
    """The service refused the credentials."""


class TransportError(RxHubsError):
    """A transport failure: the link or connection dropped, a call timed out. Retriable."""

    default_retriable = True


class ReceiverClosedError(TransportError):
    """A receive on a receiver that was closed. Not retriable: open a new receiver."""

    default_retriable = False


class OwnershipLostError(RxHubsError):
    """The partition belongs to another consumer now. Not retriable: stop working on it.

    Raised when another reader with a higher owner level took the partition (the service detached this link),
    and by a fenced checkpoint store when a former owner writes after another consumer claimed the partition
    (``update_checkpoint_fenced``; the stored checkpoint is left as it was).
    """


class StoreError(RxHubsError):
    """The checkpoint store failed. Retriable by default (an outage); see subclasses."""

    default_retriable = True


class OwnershipConflictError(StoreError):
    """A claim lost its compare-and-swap: someone else changed the ownership record first."""

    default_retriable = False


class CorruptRecordError(StoreError):
    """A stored ownership or checkpoint record could not be parsed."""

    default_retriable = False


class CheckpointOutOfRangeError(StoreError):
    """A stored checkpoint lies outside its partition (a recreated hub, or a position the retention dropped).

    After its last event (the hub was deleted and created again) or before its first retained one (the events
    between expired unread). Not retriable: move the checkpoint (``rxhubs checkpoints reset``) or choose another
    ``checkpoint_out_of_range`` policy.
    """

    default_retriable = False


class SinkError(RxHubsError):
    """A sink (a Spark write, a user writer) failed after its retries; nothing after it was checkpointed."""


class PublishError(SinkError):
    """Events of one source partition could not be published to the target hub (after the target's retries).

    Raised by :func:`rxhubs.operators.publish`; the target's own error is on ``__cause__``, and ``retriable`` is
    its flag (an unreachable hub may come back; an unknown hub or an oversized event will not).

    Attributes:
        partition_id: The source partition whose batch was not published.
        target: The target hub's name.
    """

    def __init__(
        self, message: str = "", *, partition_id: str = "", target: str = "", retriable: bool | None = None
    ) -> None:
        super().__init__(message, retriable=retriable)
        self.partition_id = partition_id
        self.target = target


class StateError(RxHubsError):
    """Operator state (``hops.window``, ``hops.scan_state``) cannot be kept or restored.

    Saved state that is corrupt, saved under other operator parameters, or grown past its size cap. Not
    retriable: the partition stops (and is released) rather than go on with wrong state.
    """

    default_retriable = False


class CaptureGapError(RxHubsError):
    """A backfill from Capture files cannot reach the hub: events in between are in neither.

    Files are missing (a gap between two files), or the hub's retention dropped events Capture never wrote. Names
    the partition and the sequence numbers missing; nothing after them is read (never a silent skip). Not
    retriable: restore the files, or move the checkpoint past the gap (``rxhubs checkpoints reset``).

    Example:
        >>> str(CaptureGapError("0", 1200, 1499))
        'partition 0: events 1200..1499 are neither in the Capture files nor retained by the hub'
    """

    default_retriable = False

    def __init__(self, partition_id: str, first_missing: int, last_missing: int, detail: str = "") -> None:
        text = (f"partition {partition_id}: events {first_missing}..{last_missing} are neither in the Capture "
                f"files nor retained by the hub")
        super().__init__(text + (f" ({detail})" if detail else ""))
        self.partition_id = partition_id
        self.first_missing = first_missing
        self.last_missing = last_missing


class EmulatorError(RxHubsError):
    """The local Event Hubs emulator could not start or serve."""


class QuotaExceededError(RxHubsError):
    """A service limit was reached, e.g. more than 5 readers on one partition and consumer group."""
