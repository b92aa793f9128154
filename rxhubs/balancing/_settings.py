"""The keyword options of :func:`rxhubs.partitions` and :func:`rxhubs.consume`, as one validated value."""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from reactivex import abc

from rxhubs._models import CloseReason, ErrorContext, PartitionContext, Position
from rxhubs.balancing._planner import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, BalancingSettings, Strategy
from rxhubs.errors import ConfigurationError
from rxhubs.sources import ReadSettings
from rxhubs.sources._settings import DEFAULT_READ

__all__ = ["ConsumerOptions", "ConsumerSettings", "Hooks", "StartOption", "default_owner_id"]

#: A position for every partition, or one per partition id (partitions left out use the default).
StartOption = Position | Mapping[str, Position] | None

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


def _check_start(name: str, option: object) -> None:
    if option is None or isinstance(option, Position):
        return
    if isinstance(option, Mapping) and all(isinstance(k, str) and isinstance(v, Position) for k, v in option.items()):
        return
    raise ConfigurationError(f"{name} must be an rxhubs.Position or a mapping of partition id to Position")


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
        default_start: Where a partition without a checkpoint is read from.
        start: Where to read instead of the checkpoints stored before this consumer started (a reset).
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event.
        prefetch: Events the transport may buffer ahead.
        max_inflight: Most unacknowledged batches per partition.
        owner_level: Owner level (epoch) of the receivers; None for non-exclusive receivers.
        emit_empty: Emit an empty batch when ``max_wait`` passes without events (for time-driven pipelines).
        track_last_enqueued_event_properties: Batches carry the partition's newest event (for lag); None keeps
            the hub's setting.

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
    default_start: StartOption = Position.earliest()  # noqa: RUF009 - an immutable value
    start: StartOption = None
    max_batch_size: int = DEFAULT_READ.max_batch_size
    max_wait: float = DEFAULT_READ.max_wait
    prefetch: int = DEFAULT_READ.prefetch
    max_inflight: int = DEFAULT_READ.max_inflight
    owner_level: int | None = 0
    emit_empty: bool = False
    track_last_enqueued_event_properties: bool | None = None
    balancing: BalancingSettings = field(init=False, repr=False, compare=False)
    reading: ReadSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner_id = self.owner_id
        if not isinstance(owner_id, str) or not owner_id or "/" in owner_id:
            raise ConfigurationError(f"owner_id must be a non-empty str without '/', got {owner_id!r}")
        _check_start("default_start", self.default_start)
        _check_start("start", self.start)
        reading = ReadSettings(
            self.max_batch_size,
            self.max_wait,
            self.max_inflight,
            self.prefetch,
            self.owner_level,
            self.emit_empty,
            self.track_last_enqueued_event_properties,
        )
        balancing = BalancingSettings(self.load_balancing_interval, self.ownership_expiration, self.strategy)
        object.__setattr__(self, "reading", reading)
        object.__setattr__(self, "balancing", balancing)


class ConsumerOptions(TypedDict, total=False):
    """The keyword options of :func:`rxhubs.consume` (those of :func:`rxhubs.partitions`)."""

    owner_id: str | None
    strategy: Strategy
    load_balancing_interval: float
    ownership_expiration: float
    default_start: StartOption
    start: StartOption
    max_batch_size: int
    max_wait: float
    prefetch: int
    max_inflight: int
    owner_level: int | None
    emit_empty: bool
    track_last_enqueued_event_properties: bool | None
    scheduler: abc.SchedulerBase | None
    on_partition_initialize: InitializeHook | None
    on_partition_close: CloseHook | None
    on_partition_error: ErrorHook | None


@dataclass(frozen=True, slots=True)
class Hooks:
    """The user's callbacks for partition events (each may be None)."""

    on_partition_initialize: InitializeHook | None = None
    on_partition_close: CloseHook | None = None
    on_partition_error: ErrorHook | None = None
