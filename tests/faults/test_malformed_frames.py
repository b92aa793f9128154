"""Malformed frames on a live link: the partition that read them reconnects, the others keep flowing.

Consumer ``a`` reads two partitions through a FaultProxy, ``b`` the other two straight from the emulator
(tests/faults/netkit.py). The proxy damages one event frame on its way to ``a`` (``FaultProxy.corrupt``: a byte
of the payload inverted, a size field that ends the frame halfway, one that says 2 GB, or the message annotations'
section code inverted: an event without sequence number, which must not reach the pipeline). That partition's
receiver must fail with a retriable ``TransportError`` and reopen after the last event it handed out; ``a``'s
other partition and ``b``'s must keep being read; nothing is lost, repeated or reordered; no process crashes.
The receivers read on the native path (the suite's autouse fixture fails a fallback), where the compiled frame
reader meets the bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxhubs.errors import TransportError
from rxhubs.transport._frame_errors import FrameError
from tests.faults.kit import wait_until
from tests.faults.netkit import Producer, Run, proxy_to

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def run(emulator_factory: Any, tmp_path: Path) -> Iterator[Run]:
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # the SDK logs each lost link
    emulator = emulator_factory(hubs={"faults": 4})
    conn = emulator.connection_string("faults")
    try:
        with proxy_to(emulator.port, seed=46) as proxy, Run(conn, proxy, tmp_path, Producer(conn)) as started:
            yield started
    finally:
        logger.setLevel(level)


@pytest.mark.parametrize("kind", ["flip", "truncate", "oversize", "section"])
def test_a_damaged_event_frame_costs_its_partition_one_reconnect(run: Run, kind: str) -> None:
    proxy = run.proxy
    errors_before = len(run.a.errors)
    accepted_before = proxy.stats.connections_accepted
    fault_from = time.time()
    proxy.corrupt(kind)
    assert wait_until(lambda: proxy.stats.frames_corrupted == 1, 30), proxy.stats
    # the damaged partition's receiver fails and reconnects through the proxy (a new connection)
    assert wait_until(lambda: len(run.a.errors) > errors_before, 30), (kind, proxy.stats)
    assert wait_until(lambda: proxy.stats.connections_accepted > accepted_before, 30), proxy.stats
    time.sleep(max(0.0, fault_from + 3.0 - time.time()))
    fault_to = time.time()
    # partition '' is the consumer's own (a store call slow under load), not a receiver's: the damage is felt by one
    felt = [(partition, e) for partition, e in run.a.errors[errors_before:] if partition]
    hit = {partition for partition, _ in felt}
    assert len(hit) == 1 and hit <= run.a_partitions, felt
    assert all(isinstance(e, TransportError) and e.retriable for _, e in felt), felt
    if kind == "section":  # a well-formed event without its annotations: said as such, not as a TypeError
        assert all(isinstance(e, FrameError) and "no sequence number" in str(e) for _, e in felt), felt
    # a's other partition kept being read after the damage
    others = run.a_partitions - hit
    assert Run.reading(run.a, others, fault_from + 1.0, fault_to), run.around(fault_from, fault_to, fault_from)
    expected = run.drain()
    run.check(expected, fault_from, fault_to)  # nothing lost or repeated, in order; b read all through
    assert proxy.stats.frames_corrupted == 1  # one frame, one connection
