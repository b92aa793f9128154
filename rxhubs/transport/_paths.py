"""Which receive path each link of this process took, and why: the proof that the native path ran where expected.

A receiver reads its partition on one of three paths: ``native`` (the direct loop with the compiled frame reader,
the default), ``sdk-loop`` (the direct loop over pyamqp's own reads) or ``public`` (the SDK's ``receive_batch``).
A user chooses a slower one with ``RXHUBS_NO_EXTENSIONS=1`` or ``RXHUBS_DIRECT_RECEIVE=0``; every other way onto
it is a **fallback**: the compiled reader was not built or is stale, a guard of the SDK's private parts failed,
the SDK version or transport is not supported. A fallback is logged (INFO per link, as before) and also recorded
here, so that test suites which expect the native path can fail when a receiver silently left it
(``tests/support/native.py``), and ``rxhubs doctor``-like tools can show what ran.

Recording is cheap (once per link opened) and thread-safe; the record keeps the last :data:`KEEP` links.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

__all__ = ["KEEP", "LinkPath", "fallbacks", "opened", "record", "reset"]

#: Links remembered per process (the oldest are forgotten first).
KEEP = 10_000

_lock = threading.Lock()
_links: deque[LinkPath] = deque(maxlen=KEEP)


@dataclass(frozen=True)
class LinkPath:
    """One link opened: its partition, the path it reads on, why, and whether the user chose that path."""

    partition_id: str
    path: str  # "native", "sdk-loop" or "public"
    why: str
    chosen: bool  # True: the native path, or the slower one the user asked for; False: a fallback

    @property
    def fallback(self) -> bool:
        """True when the link left the native path without being asked to."""
        return not self.chosen


def record(partition_id: str, path: str, why: str, *, chosen: bool) -> None:
    """Note the path one link took (called by the receive paths once per link opened).

    Example:
        >>> reset(); record("0", "sdk-loop", "a guard failed", chosen=False)
        >>> [(p.partition_id, p.path, p.fallback) for p in opened()]
        [('0', 'sdk-loop', True)]
        >>> reset()
    """
    with _lock:
        _links.append(LinkPath(partition_id, path, why, chosen))


def opened() -> list[LinkPath]:
    """Every link recorded since the last :func:`reset`, oldest first."""
    with _lock:
        return list(_links)


def fallbacks() -> list[LinkPath]:
    """The links that left the native path without being asked to (see the module docstring)."""
    return [link for link in opened() if link.fallback]


def reset() -> None:
    """Forget what was recorded (a test's start)."""
    with _lock:
        _links.clear()
