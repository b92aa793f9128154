"""Test doubles and helpers: the in-memory hub, and (with the marble kit) virtual-time pipeline tests.

Example:
    >>> from rxhubs.testing import InMemoryEventHub
    >>> hub = InMemoryEventHub(partition_count=2)
    >>> hub.send([b"x"], partition_id="0")[0].sequence_number
    0
"""

from __future__ import annotations

from rxhubs.testing._marbles import MarbleSink, MarbleTest, Peer, marble_test, symbols, to_symbols
from rxhubs.testing._memory_hub import InMemoryEventHub, InMemoryReceiver

__all__ = [
    "InMemoryEventHub",
    "InMemoryReceiver",
    "MarbleSink",
    "MarbleTest",
    "Peer",
    "marble_test",
    "symbols",
    "to_symbols",
]
