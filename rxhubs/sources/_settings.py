"""How a partition stream reads: one frozen, validated value shared by every source."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rxhubs.errors import ConfigurationError

__all__ = ["DEFAULTS", "DEFAULT_READ", "ReadSettings"]


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")


def _seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How one partition is read: batch size and wait, flow control, the receiver's prefetch and owner level.

    Validated once, when built: every invalid value is a :class:`~rxhubs.errors.ConfigurationError` naming it.

    Attributes:
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event.
        max_inflight: Most batches emitted but not yet acknowledged (backpressure).
        prefetch: Events the transport may buffer ahead.
        owner_level: Owner level (epoch) of the receiver, None for a non-exclusive one.
        emit_empty: Emit an empty batch when ``max_wait`` passes without events (a heartbeat).
        track_last_enqueued_event_properties: Batches carry the partition's newest event (for lag); None keeps
            the hub's setting.
        min_batch_size: Hold events until a batch has this many, or ``max_wait`` passed since its first event
            (batches users shape, see ``rxhubs.sources._shape``); None (or 1): hand out what is there.

    Example:
        >>> ReadSettings(max_batch_size=100).max_inflight
        16
        >>> ReadSettings(max_wait=-1)
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: max_wait must be a number of seconds >= 0, got -1
    """

    max_batch_size: int = 300
    max_wait: float = 1.0
    max_inflight: int = 16
    #: Larger than the SDK's 300: its receive loop pauses 50 ms per read, so 300 caps a partition near
    #: 4-6k events/s; 1000 lifts that cap at the price of about 4 x 1000 buffered events per partition.
    prefetch: int = 1000
    owner_level: int | None = None
    emit_empty: bool = False
    track_last_enqueued_event_properties: bool | None = None
    min_batch_size: int | None = None

    @property
    def shaped(self) -> bool:
        """True when batches wait for ``min_batch_size`` events (or ``max_wait`` since their first)."""
        return self.min_batch_size is not None and self.min_batch_size > 1

    def __post_init__(self) -> None:
        _positive_int("max_batch_size", self.max_batch_size)
        _positive_int("max_inflight", self.max_inflight)
        _positive_int("prefetch", self.prefetch)
        _seconds("max_wait", self.max_wait)
        level = self.owner_level
        if level is not None and (isinstance(level, bool) or not isinstance(level, int) or level < 0):
            raise ConfigurationError(f"owner_level must be an int >= 0 or None, got {level!r}")
        if not isinstance(self.emit_empty, bool):
            raise ConfigurationError(f"emit_empty must be a bool, got {self.emit_empty!r}")
        track = self.track_last_enqueued_event_properties
        if track is not None and not isinstance(track, bool):
            raise ConfigurationError(f"track_last_enqueued_event_properties must be a bool or None, got {track!r}")
        low = self.min_batch_size
        if low is not None:
            _positive_int("min_batch_size", low)
            if low > self.max_batch_size:
                raise ConfigurationError(
                    f"min_batch_size ({low}) must be at most max_batch_size ({self.max_batch_size}): raise"
                    " max_batch_size too"
                )


#: The defaults, as a value (the signatures of ``partition_batches``, ``partitions`` and ``consume`` use it).
DEFAULT_READ = ReadSettings()

#: The same defaults as a dict (kept for code written against rxhubs 0.1).
DEFAULTS: dict[str, int | float] = {
    "max_batch_size": DEFAULT_READ.max_batch_size,
    "max_wait": DEFAULT_READ.max_wait,
    "max_inflight": DEFAULT_READ.max_inflight,
    "prefetch": DEFAULT_READ.prefetch,
}
