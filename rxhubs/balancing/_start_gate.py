"""Consumers that start together split the partitions from their first round (``run_workers``; private).

Each consumer counts the others by their presence records, written with its first claim. Consumers started at
the same moment would each plan their first round before seeing any other's record: the first to claim takes
every partition, and the others wait a balancing interval for it to hand their share over (on a backlog, one
worker reads alone for that interval, and every handed partition is a handover). :func:`rxhubs.run_workers`
knows its workers start together, so each worker process sets a **start gate** (:func:`set_start_gate`): the
first balancing loop of the process writes its presence record, waits at the gate until every sibling has
written its own (or the gate gives up), and only then plans. Every sibling's first round then sees all of
them and claims its own share: the claims are dealt in owner-id order, so they do not collide.

Example:
    >>> import asyncio
    >>> async def gate() -> None:
    ...     pass
    >>> set_start_gate(gate)
    >>> take_start_gate() is gate, take_start_gate()
    (True, None)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from rxhubs._models import Ownership
from rxhubs.balancing._store_calls import StoreCalls

__all__ = ["Gate", "announce", "set_start_gate", "take_start_gate"]

log = logging.getLogger("rxhubs.balancing")

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


async def announce(calls: StoreCalls, presence_record: Callable[[list[Ownership]], Ownership], gate: Gate) -> None:
    """Write this consumer's presence record, then wait at ``gate``; a failed write only costs the even start."""
    try:
        await calls.claim([presence_record(await calls.presence())])
    except Exception as exc:  # the first round writes it anyway; the siblings' gate gives up in time
        log.warning("balancing: announcing this consumer before its first round failed (%s)", exc)
    await gate()
