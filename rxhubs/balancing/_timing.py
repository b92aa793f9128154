"""How often a consumer balances and when its records expire: :class:`BalancingSettings` and its defaults.

The inputs of every round that are not the store's records: the load-balancing interval, the ownership
expiration, the strategy and the store timeout, checked once when the consumer is made. The planner
(:mod:`rxhubs.balancing._planner`) and the loop (:mod:`rxhubs.balancing._loop`) read them; they are validated
here so that a bad value fails at ``consume(...)``, not at the first round.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

from rxhubs.errors import ConfigurationError

__all__ = ["DEFAULT_EXPIRATION", "DEFAULT_INTERVAL", "STRATEGIES", "BalancingSettings", "Strategy"]

log = logging.getLogger("rxhubs.balancing")

Strategy = Literal["greedy", "balanced"]
STRATEGIES: tuple[str, ...] = ("greedy", "balanced")

#: Seconds between two balancing rounds (ownership listed, renewed, claimed): the .NET processor's default.
DEFAULT_INTERVAL = 10.0
#: Seconds after its last renewal a record expires: three missed renewals, as in the .NET processor.
DEFAULT_EXPIRATION = 30.0


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class BalancingSettings:
    """How often a consumer balances, when records expire, and how fast partitions move.

    Attributes:
        load_balancing_interval: Seconds between balancing rounds; each round renews this consumer's records.
        ownership_expiration: Seconds after its last renewal a record is claimable by others. Must exceed
            the interval; a warning is logged below three intervals (one slow store call would then let
            another consumer take a partition that is still being read).
        strategy: ``"greedy"`` (converge within two intervals) or ``"balanced"`` (one partition per interval).
        store_timeout: Seconds a store call may take before the round counts as failed and is retried
            (None: one interval).

    Raises:
        ConfigurationError: Non-positive times, an expiration not above the interval, an unknown strategy.

    Example:
        >>> BalancingSettings().ownership_expiration
        30.0
    """

    load_balancing_interval: float = DEFAULT_INTERVAL
    ownership_expiration: float = DEFAULT_EXPIRATION
    strategy: Strategy = "greedy"
    store_timeout: float | None = None

    def __post_init__(self) -> None:
        interval, expiration = self.load_balancing_interval, self.ownership_expiration
        if not _is_number(interval) or interval <= 0:
            raise ConfigurationError(f"load_balancing_interval must be a number of seconds > 0, got {interval!r}")
        if not _is_number(expiration) or expiration <= 0:
            raise ConfigurationError(f"ownership_expiration must be a number of seconds > 0, got {expiration!r}")
        if expiration <= interval:
            raise ConfigurationError(
                f"ownership_expiration ({expiration} s) must exceed load_balancing_interval ({interval} s):"
                " records would expire between two renewals"
            )
        timeout = self.store_timeout
        if timeout is not None and (not _is_number(timeout) or timeout <= 0):
            raise ConfigurationError(f"store_timeout must be a number of seconds > 0 or None, got {timeout!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigurationError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if expiration < 3 * interval:
            log.warning(
                "ownership_expiration (%.1f s) is less than 3x load_balancing_interval (%.1f s): one slow or"
                " failed renewal may let another consumer take a partition that is still being read",
                expiration,
                interval,
            )
