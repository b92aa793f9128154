"""The start gate of consumers started together in one process tree (``run_workers``; private).

:func:`rxhubs.run_workers` sets it in each first-started worker process (:func:`set_start_gate`); the first
balancing loop of the process takes it (:func:`take_start_gate`) and waits there, after writing its presence
record, before its first round (``rxhubs.balancing._start_gate`` says why). Here, below both, so that neither
imports the other.

Example:
    >>> async def gate() -> None:
    ...     pass
    >>> set_start_gate(gate)
    >>> take_start_gate() is gate, take_start_gate()
    (True, None)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Gate", "barrier_gate", "set_start_gate", "take_start_gate"]

_log = logging.getLogger("rxhubs.workers")

#: Waits until every sibling announced itself (or gives up); never raises.
Gate = Callable[[], Awaitable[None]]

_gate: Gate | None = None


def set_start_gate(gate: Gate | None) -> None:
    """The gate the next balancing loop of this process waits at before its first round (None: no gate)."""
    global _gate
    _gate = gate


def take_start_gate() -> Gate | None:
    """The gate set for this process, once: the first balancing loop takes it, later ones start at once."""
    global _gate
    gate, _gate = _gate, None
    return gate


def barrier_gate(siblings: Any, timeout: float) -> Gate:
    """The gate of a first-started worker: wait until every sibling announced itself, at most ``timeout`` s.

    ``siblings`` is a ``multiprocessing`` barrier shared by the workers started together.
    """

    async def wait() -> None:
        try:
            await asyncio.to_thread(siblings.wait, timeout)
        except threading.BrokenBarrierError:
            _log.info("workers: not every worker announced itself within %.0f s; starting anyway", timeout)

    return wait
