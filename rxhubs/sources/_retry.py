"""Retry with exponential backoff for retriable errors."""

from __future__ import annotations

from dataclasses import dataclass

from rxhubs.errors import ConfigurationError, RxHubsError

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How a source retries retriable errors: waits ``initial * multiplier**(n-1)``, capped at ``maximum``.

    Deterministic (no jitter), so retries line up in virtual-time tests.

    Attributes:
        initial: First wait, seconds.
        maximum: Longest wait, seconds.
        multiplier: Growth per attempt.
        max_retries: Attempts before the error ends the stream (None: retry forever).

    Example:
        >>> [Backoff(initial=0.5, maximum=3.0).delay(n) for n in (1, 2, 3, 4)]
        [0.5, 1.0, 2.0, 3.0]
    """

    initial: float = 0.2
    maximum: float = 10.0
    multiplier: float = 2.0
    max_retries: int | None = 10

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < self.initial or self.multiplier < 1:
            raise ConfigurationError(f"invalid backoff {self!r}")
        if self.max_retries is not None and self.max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0 or None")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (from 1)."""
        return float(min(self.maximum, self.initial * self.multiplier ** (attempt - 1)))

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether retry number ``attempt`` (from 1) may be made after ``error``."""
        retriable = isinstance(error, RxHubsError) and error.retriable
        return retriable and (self.max_retries is None or attempt <= self.max_retries)
