"""Schemas by id, fetched once: the cache both schema kinds share, with failed fetches remembered for a while."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["RETRY_FAILED_FETCH", "fetch_once"]

#: Seconds a failed fetch (an unknown id, a registry that refused) is remembered: the events of that id fail
#: with the same reason without a registry call each, and the id is asked for again after this.
RETRY_FAILED_FETCH = 30.0


def fetch_once(cache: dict[str, Any], failures: dict[str, tuple[float, BaseException]], schema_id: str,
               load: Callable[[str], Any]) -> Any:
    """``cache[schema_id]``, else ``load(schema_id)`` cached; a failure is re-raised for ``RETRY_FAILED_FETCH`` s.

    Example:
        >>> calls = []
        >>> def load(schema_id):
        ...     calls.append(schema_id)
        ...     raise KeyError(schema_id)
        >>> cache, failures = {}, {}
        >>> for _ in range(3):
        ...     try:
        ...         fetch_once(cache, failures, "x", load)
        ...     except KeyError:
        ...         pass
        >>> calls
        ['x']
    """
    value = cache.get(schema_id)
    if value is not None:
        return value
    failed = failures.get(schema_id)
    if failed is not None and time.monotonic() - failed[0] < RETRY_FAILED_FETCH:
        raise failed[1].with_traceback(None)
    try:
        value = load(schema_id)
    except Exception as exc:
        failures[schema_id] = (time.monotonic(), exc)
        raise
    failures.pop(schema_id, None)
    cache[schema_id] = value
    return value
