"""The one retry policy: which errors are worth retrying (:func:`is_retriable`), and how long to wait.

Every retry in rxhubs (a partition stream reopening its receiver, the balancing loop's store calls, the
checkpoint operator's writes) asks the same two questions here, so an error gets the same answer everywhere:
an rxhubs error says for itself (its ``retriable`` flag); anything else is unexpected and presumed transient,
retried with backoff (and reported to ``on_partition_error`` where there is one) until the attempts run out.
"""

from __future__ import annotations

from dataclasses import dataclass

from rxhubs.errors import ConfigurationError, RxHubsError

__all__ = ["Backoff", "is_retriable"]


def is_retriable(error: BaseException) -> bool:
    """Whether trying again later may succeed: an rxhubs error's own flag; True for anything else.

    Example:
        >>> from rxhubs.errors import NotFoundError, StoreError
        >>> is_retriable(StoreError("store unreachable")), is_retriable(NotFoundError("no such hub"))
        (True, False)
        >>> is_retriable(ConnectionResetError())
        True
    """
    return error.retriable if isinstance(error, RxHubsError) else isinstance(error, Exception)


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
        return is_retriable(error) and (self.max_retries is None or attempt <= self.max_retries)
