"""Test doubles and helpers: the in-memory hub, and (with the marble kit) virtual-time pipeline tests.

Work that a pipeline awaits (``hops.process`` with an ``async def``, a store of your own) runs in virtual time
when it waits with :func:`sleep`, :class:`Signal` and :func:`now` from here instead of asyncio's own: under
``rxhubs.run`` they are asyncio's, under a ``TestScheduler`` they count in its clock.

Example:
    >>> from rxhubs.testing import InMemoryEventHub
    >>> hub = InMemoryEventHub(partition_count=2)
    >>> hub.send([b"x"], partition_id="0")[0].sequence_number
    0
"""

from __future__ import annotations

from rxhubs._rx import Signal, never, now, sleep
from rxhubs.testing._fault_proxy import FaultProxy, ProxyStats
from rxhubs.testing._marbles import MarbleSink, MarbleTest, Peer, marble_test, symbols, to_symbols
from rxhubs.testing._memory_hub import InMemoryEventHub
from rxhubs.testing._memory_receiver import InMemoryReceiver

__all__ = [
    "FaultProxy",
    "InMemoryEventHub",
    "InMemoryReceiver",
    "MarbleSink",
    "MarbleTest",
    "Peer",
    "ProxyStats",
    "Signal",
    "marble_test",
    "never",
    "now",
    "sleep",
    "symbols",
    "to_symbols",
]
