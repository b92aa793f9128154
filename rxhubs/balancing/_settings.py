"""The keyword options of :func:`rxhubs.partitions` and :func:`rxhubs.consume`, as one validated value."""

from __future__ import annotations

import datetime as _dt
import os
import re
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from reactivex import abc

from rxhubs._models import CloseReason, ErrorContext, PartitionContext, Position
from rxhubs.balancing._positions import TablePositions
from rxhubs.balancing._start_check import OutOfRangePolicy, check_policy
from rxhubs.balancing._timing import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, BalancingSettings, Strategy
from rxhubs.errors import ConfigurationError
from rxhubs.sources import Capture, ReadSettings
from rxhubs.sources._settings import DEFAULT_READ

__all__ = [
    "ConsumerOptions",
    "ConsumerSettings",
    "Hooks",
    "StartInput",
    "StartOption",
    "coerce_start",
    "default_owner_id",
]

#: A position for every partition, or one per partition id (partitions left out use the default).
StartOption = Position | Mapping[str, Position] | None
#: What ``start`` / ``default_start`` accept: Positions, or azure-eventhub's ``starting_position`` forms.
PositionLike = Position | str | int | _dt.datetime
StartInput = PositionLike | Mapping[str, PositionLike] | None

#: ``on_partition_initialize(context)``; may be ``async``: the partition is read once it returned.
InitializeHook = Callable[[PartitionContext], Any]
#: ``on_partition_close(context, reason)``; may be ``async``: the partition is released once it returned.
CloseHook = Callable[[PartitionContext, CloseReason], Any]
#: ``on_partition_error(context, error)``; ``context`` is an :class:`~rxhubs.ErrorContext` naming the operation.
ErrorHook = Callable[[ErrorContext, Exception], Any]

_OWNER_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def default_owner_id() -> str:
    """A readable, unique owner id: host, process id and a random suffix (``myhost-4242-1f3a9c0b``)."""
    host = _OWNER_ID_CHARS.sub("-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def coerce_start(name: str, option: object, inclusive: bool | Mapping[str, bool]) -> StartOption:
    """A start option as Positions: a Position, the SDK's forms (see :meth:`Position.coerce`), or a mapping.

    Raises:
        ConfigurationError: For anything else.

    Example:
        >>> coerce_start("start", {"0": 10, "1": "@latest"}, {"0": True})
        {'0': Position(kind='sequence_number', value=10, inclusive=True), '1': Position(kind='latest', ...)}
    """

    def one(value: object, partition_id: str | None) -> Position:
        flag = inclusive.get(partition_id or "", False) if isinstance(inclusive, Mapping) else inclusive
        try:
            return Position.coerce(value, inclusive=bool(flag))
        except ConfigurationError:
            where = f"{name}[{partition_id!r}]" if partition_id is not None else name
            raise ConfigurationError(
                f"{where} must be an rxhubs.Position or a form azure-eventhub accepts (\"-1\", \"@latest\", a"
                f" sequence number, a datetime, an offset string), got {value!r}"
            ) from None

    if option is None:
        return None
    if isinstance(option, Mapping):
        if not all(isinstance(k, str) for k in option):
            raise ConfigurationError(f"{name} maps partition ids (str) to positions")
        return {k: one(v, k) for k, v in option.items()}
    return one(option, None)


def pick(option: StartOption, partition_id: str) -> Position | None:
    """The position ``option`` gives ``partition_id``, if any."""
    if option is None or isinstance(option, Position):
        return option
    return option.get(partition_id)


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """Everything one consumer of a consumer group is configured with, validated once.

    :func:`rxhubs.partitions` and :func:`rxhubs.consume` build one from their keyword options; each option
    has one meaning (see ``docs/balancing.md``). Balancing and reading are handed on as
    :class:`~rxhubs.balancing.BalancingSettings` and :class:`~rxhubs.sources.ReadSettings`.

    Attributes:
        owner_id: This consumer's id (default: host, process id and a random suffix).
        strategy: ``"greedy"`` (converge within two intervals) or ``"balanced"`` (one partition per interval).
        load_balancing_interval: Seconds between two balancing rounds.
        ownership_expiration: Seconds without renewal after which other consumers take a partition over.
        default_start: Where a partition without a checkpoint is read from: a :class:`~rxhubs.Position`, a form
            azure-eventhub's ``starting_position`` accepts (``"-1"``, ``"@latest"``, a sequence number, a
            datetime, an offset string), or a mapping of partition id to either.
        start: Where to read instead of the checkpoints stored before this consumer started (a reset); the
            same forms.
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event; with ``min_batch_size``, also the longest a batch
            waits to fill, from its first event.
        prefetch: Events the transport may buffer ahead.
        max_inflight: Most unacknowledged batches per partition.
        owner_level: Owner level (epoch) of the receivers; None for non-exclusive receivers.
        emit_empty: Emit an empty batch when ``max_wait`` passes without events (for time-driven pipelines).
        track_last_enqueued_event_properties: Batches carry the partition's newest event (for lag); None keeps
            the hub's setting.
        start_inclusive: Whether a sequence-number, time or offset start includes that event (the SDK's
            ``starting_position_inclusive``); a bool, or a mapping of partition id to bool.
        store_timeout: Seconds a store call may take before it fails (retriable); None: one interval.
        checkpoint_out_of_range: What to do with a checkpoint outside its partition, found when the partition is
            claimed: ``"earliest"``, ``"latest"``, ``"fail"``, or None (no check); see ``_start_check``.
        seed_checkpoint: Write a checkpoint when a partition without one is claimed, where ``default_start``
            lands (so KEDA does not count the whole retention of a new group).
        min_batch_size: A partition's batch is delivered once it holds this many events or ``max_wait`` passed
            since its first; None: what each pull finds.

    Example:
        >>> settings = ConsumerSettings(owner_id="a", load_balancing_interval=2.0, ownership_expiration=6.0)
        >>> settings.balancing.load_balancing_interval, settings.reading.owner_level
        (2.0, 0)
        >>> ConsumerSettings(owner_id="a/b")
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: owner_id must be a non-empty str without '/', got 'a/b'
    """

    owner_id: str = field(default_factory=default_owner_id)
    strategy: Strategy = "greedy"
    load_balancing_interval: float = DEFAULT_INTERVAL
    ownership_expiration: float = DEFAULT_EXPIRATION
    default_start: StartInput = Position.earliest()  # noqa: RUF009 - an immutable value
    start: StartInput = None
    max_batch_size: int = DEFAULT_READ.max_batch_size
    max_wait: float = DEFAULT_READ.max_wait
    prefetch: int = DEFAULT_READ.prefetch
    max_inflight: int = DEFAULT_READ.max_inflight
    owner_level: int | None = 0
    emit_empty: bool = False
    track_last_enqueued_event_properties: bool | None = None
    start_inclusive: bool | Mapping[str, bool] = False
    store_timeout: float | None = None
    checkpoint_out_of_range: OutOfRangePolicy | None = "earliest"
    seed_checkpoint: bool = False
    min_batch_size: int | None = None
    default_positions: StartOption = field(init=False, repr=False, compare=False)
    start_positions: StartOption = field(init=False, repr=False, compare=False)
    balancing: BalancingSettings = field(init=False, repr=False, compare=False)
    reading: ReadSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner_id = self.owner_id
        if not isinstance(owner_id, str) or not owner_id or "/" in owner_id:
            raise ConfigurationError(f"owner_id must be a non-empty str without '/', got {owner_id!r}")
        check_policy(self.checkpoint_out_of_range)
        if not isinstance(self.seed_checkpoint, bool):
            raise ConfigurationError(f"seed_checkpoint must be a bool, got {self.seed_checkpoint!r}")
        inclusive = self.start_inclusive
        if not isinstance(inclusive, bool | Mapping):
            raise ConfigurationError(f"start_inclusive must be a bool or a mapping of ids to bools, got {inclusive!r}")
        object.__setattr__(self, "default_positions", coerce_start("default_start", self.default_start, inclusive))
        object.__setattr__(self, "start_positions", coerce_start("start", self.start, inclusive))
        reading = ReadSettings(
            self.max_batch_size,
            self.max_wait,
            self.max_inflight,
            self.prefetch,
            self.owner_level,
            self.emit_empty,
            self.track_last_enqueued_event_properties,
            self.min_batch_size,
        )
        balancing = BalancingSettings(
            self.load_balancing_interval, self.ownership_expiration, self.strategy, self.store_timeout
        )
        object.__setattr__(self, "reading", reading)
        object.__setattr__(self, "balancing", balancing)


class ConsumerOptions(TypedDict, total=False):
    """The keyword options of :func:`rxhubs.consume` (those of :func:`rxhubs.partitions`)."""

    owner_id: str | None
    strategy: Strategy
    load_balancing_interval: float
    ownership_expiration: float
    store_timeout: float | None
    checkpoint_out_of_range: OutOfRangePolicy | None
    seed_checkpoint: bool
    default_start: StartInput
    start: StartInput
    start_inclusive: bool | Mapping[str, bool]
    max_batch_size: int
    max_wait: float
    min_batch_size: int | None
    prefetch: int
    max_inflight: int
    owner_level: int | None
    emit_empty: bool
    track_last_enqueued_event_properties: bool | None
    scheduler: abc.SchedulerBase | None
    on_partition_initialize: InitializeHook | None
    on_partition_close: CloseHook | None
    on_partition_error: ErrorHook | None
    positions: TablePositions | None
    backfill: Capture | None


@dataclass(frozen=True, slots=True)
class Hooks:
    """The user's callbacks for partition events (each may be None)."""

    on_partition_initialize: InitializeHook | None = None
    on_partition_close: CloseHook | None = None
    on_partition_error: ErrorHook | None = None
