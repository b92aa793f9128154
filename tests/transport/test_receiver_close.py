"""Closing a receiver while its link is busy ends its receive task and releases the link, every time.

pyamqp reads each frame through ``asyncio.wait_for``, which on Python 3.11 drops a cancel that arrives in the same
step as a frame; on a busy link the receive loop then read on after ``close()``, "cancelling" for ever, and held
up the end of ``asyncio.run`` (a consumer that did not exit on SIGTERM). Receivers of busy partitions (a producer
running) closed together hit that moment: without the fix this fails at its first cycle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

import pytest

from rxhubs import Position
from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.transport import EventHub

CYCLES = 4  # of 4 receivers each (one per partition), closed together
PARTITIONS = 4


@pytest.fixture(autouse=True)
def quiet_sdk() -> Iterator[None]:
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _receive_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(("rxhubs-receive", "rxhubs-direct"))]


async def _poll(condition: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.slow
async def test_closing_a_busy_receiver_ends_its_task_and_detaches_its_link(
    emulator_factory: EmulatorFactory,  # noqa: F811
) -> None:
    emulator = emulator_factory(hubs={"busy": PARTITIONS})

    def detached() -> int:
        return sum(1 for r in emulator.link_log if r.event == "detach")

    async with EventHub.from_connection_string(emulator.connection_string("busy"), idle_timeout=2.0) as hub:
        partitions = [str(p) for p in range(PARTITIONS)]
        sending = True

        async def produce() -> int:  # keeps every link busy while its receiver closes
            sent = 0
            while sending:
                await asyncio.gather(*(hub.send([b"x" * 100] * 100, partition_id=p) for p in partitions))
                sent += 1
            return sent

        await asyncio.gather(*(hub.send([b"x" * 100] * 500, partition_id=p) for p in partitions))
        producer = asyncio.ensure_future(produce())
        try:
            await _cycles(hub, partitions, detached)
        finally:
            sending = False
            sends = await producer
        assert sends > CYCLES  # the links were busy throughout


async def _cycles(hub: EventHub, partitions: list[str], detached: Callable[[], int]) -> None:
    for cycle in range(CYCLES):
        receivers = [hub.receiver(p, start=Position.earliest(), prefetch=50) for p in partitions]
        for receiver in receivers:
            for _ in range(3):
                assert await receiver.receive_batch(10, max_wait=10)
        await asyncio.gather(*(receiver.close() for receiver in receivers))
        left = [(t.get_name(), t.cancelling()) for t in _receive_tasks()]  # close() waits for them to end
        for task in _receive_tasks():  # (the loop's end must not wait on them either way)
            task.cancel()
        assert not left, f"cycle {cycle}: receive tasks still running after close(): {left}"
        expected = (cycle + 1) * PARTITIONS
        assert await _poll(lambda n=expected: detached() == n), (cycle, detached())  # type: ignore[misc]
