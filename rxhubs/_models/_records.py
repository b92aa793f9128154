"""What stores keep: checkpoints and ownership records (frozen dataclasses, Azure's field names)."""

from __future__ import annotations

from dataclasses import dataclass

from rxhubs._models._events import Event, PartitionContext, Position
from rxhubs.errors import ConfigurationError

__all__ = ["Checkpoint", "Ownership"]


_MAX_SEQUENCE_NUMBER = 2**63 - 1


def _check_key(record: Checkpoint | Ownership, kind: str) -> None:
    """The key fields of a store record are strings, the partition id a non-empty one (else ConfigurationError)."""
    for name in ("fully_qualified_namespace", "eventhub_name", "consumer_group", "partition_id"):
        value = getattr(record, name)
        if not isinstance(value, str) or (name == "partition_id" and not value):
            raise ConfigurationError(f"{kind}.{name} must be a{' non-empty' if name == 'partition_id' else ''} str, "
                                     f"got {value!r}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The last event of a partition a consumer group has finished with; reading resumes after it.

    Example:
        >>> cp = Checkpoint("ns", "telemetry", "$Default", "0", offset="896", sequence_number=7)
        >>> cp.position()
        Position(kind='sequence_number', value=7, inclusive=False)
    """

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    offset: str | None
    sequence_number: int

    def __post_init__(self) -> None:
        _check_key(self, "Checkpoint")
        if self.offset is not None and not isinstance(self.offset, str):
            raise ConfigurationError(f"Checkpoint.offset must be a str or None, got {self.offset!r}")
        number = self.sequence_number
        if isinstance(number, bool) or not isinstance(number, int) or not -1 <= number <= _MAX_SEQUENCE_NUMBER:
            raise ConfigurationError(f"Checkpoint.sequence_number must be an int64 >= -1, got {number!r}")

    def position(self) -> Position:
        """Where to resume: just after the checkpointed event."""
        return Position.from_sequence_number(self.sequence_number, inclusive=False)

    @classmethod
    def of(cls, context: PartitionContext, event: Event) -> Checkpoint:
        """The checkpoint that marks ``event`` of ``context``'s partition as done."""
        return cls(
            context.fully_qualified_namespace,
            context.eventhub_name,
            context.consumer_group,
            context.partition_id,
            event.offset,
            event.sequence_number,
        )


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who owns a partition for a consumer group; stores compare-and-swap these on ``etag``.

    Attributes:
        owner_id: The owning consumer, or ``""`` when released.
        last_modified_time: Seconds since the epoch of the last claim or renewal (set by the store).
        etag: The store's version of the record; a claim carrying it succeeds only if unchanged,
            a claim without it only if the record does not exist yet.

    Example:
        >>> o = Ownership("ns", "telemetry", "$Default", "3", owner_id="consumer-a")
        >>> o.is_released, o.etag is None
        (False, True)
    """

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    owner_id: str
    last_modified_time: float | None = None
    etag: str | None = None

    def __post_init__(self) -> None:
        _check_key(self, "Ownership")
        if not isinstance(self.owner_id, str):
            raise ConfigurationError(f"Ownership.owner_id must be a str ('' when released), got {self.owner_id!r}")
        t = self.last_modified_time
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)):
            raise ConfigurationError(f"Ownership.last_modified_time must be seconds (a float) or None, got {t!r}")
        if self.etag is not None and not isinstance(self.etag, str):
            raise ConfigurationError(f"Ownership.etag must be a str or None, got {self.etag!r}")

    @property
    def is_released(self) -> bool:
        """True when the owner gave the partition up (an empty owner id)."""
        return self.owner_id == ""
