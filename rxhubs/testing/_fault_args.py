"""Argument checks and mode descriptions for :class:`~rxhubs.testing.FaultProxy`."""

from __future__ import annotations

import ipaddress
import math

from rxhubs.errors import ConfigurationError
from rxhubs.testing._fault_link import DIRECTIONS, DOWN, UP


def directions(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction in DIRECTIONS:
        return (direction,)
    raise ConfigurationError(f"direction must be 'both', 'upstream' or 'downstream', got {direction!r}")


def non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def positive_int(name: str, value: int, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def loopback(host: str) -> str:
    if host == "localhost":
        return host
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ConfigurationError(f"a fault proxy binds loopback only (127.0.0.1, ::1, localhost), got {host!r}")


def per_direction(values: dict[str, str]) -> str:
    if len(values) == 2 and values[UP] == values[DOWN]:
        return f"{values[UP]},both" if values[UP] else "both"
    return ";".join(f"{value},{direction}" if value else direction for direction, value in values.items())


def latency_text(seconds: float, jitter: float) -> str:
    return f"{seconds:g}s" + (f"±{jitter:g}s" if jitter else "")


def slice_text(low: int, high: int, delay: float) -> str:
    return f"{low}-{high}B" + (f"/{delay:g}s" if delay else "")
