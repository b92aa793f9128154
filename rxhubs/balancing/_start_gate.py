"""Consumers that start together split the partitions from their first round (``run_workers``; private).

Each consumer counts the others by their presence records, written with its first claim. Consumers started at
the same moment would each plan their first round before seeing any other's record: the first to claim takes
every partition, and the others wait a balancing interval for it to hand their share over (on a backlog, one
worker reads alone for that interval, and every handed partition is a handover). :func:`rxhubs.run_workers`
knows its workers start together, so each worker process sets a **start gate** (:mod:`rxhubs._siblings`): the
first balancing loop of the process writes its presence record, waits at the gate until every sibling has
written its own (or the gate gives up), and only then plans. Every sibling's first round then sees all of
them and claims its own share: the claims are dealt in owner-id order, so they do not collide.

The gate is set and taken in :mod:`rxhubs._siblings`, below both this module and ``rxhubs._workers``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rxhubs._models import Ownership
from rxhubs._siblings import Gate
from rxhubs.balancing._store_calls import StoreCalls

__all__ = ["announce"]

log = logging.getLogger("rxhubs.balancing")


async def announce(calls: StoreCalls, presence_record: Callable[[list[Ownership]], Ownership], gate: Gate) -> None:
    """Write this consumer's presence record, then wait at ``gate``; a failed write only costs the even start."""
    try:
        await calls.claim([presence_record(await calls.presence())])
    except Exception as exc:  # the first round writes it anyway; the siblings' gate gives up in time
        log.warning("balancing: announcing this consumer before its first round failed (%s)", exc)
    await gate()
