"""A management call cut off by its deadline costs the other partitions of the process nothing.

Over a slow or dead management path, the balancing loop's partition-id refresh is cut off every round. rxhubs
used to run a full garbage collection after each cut-off (to close a socket azure-eventhub abandons mid-handshake);
a full collection stops every thread of the process for as long as it walks the heap, 0.4-0.8 s in a test worker
on a loaded machine, so a consumer with one slow path stalled the healthy partitions beside it once a round (seen
in ``test_network_faults.py::test_one_second_latency_each_way``, where ``b`` read nothing for a second). The call
now runs on under :class:`~rxhubs.transport._orphans.Orphans`, which closes its own connection; only a call still
running when the hub closes is cancelled, and then one collection closes what it left.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.errors import TransportError
from rxhubs.testing import FaultProxy
from rxhubs.transport import EventHub

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every garbage collection from here on; automatic ones are off, so each is an explicit
    ``gc.collect()``."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        if enabled:
            gc.enable()


async def test_cut_off_management_calls_collect_no_garbage_until_the_hub_closes(
    emulator_factory: EmulatorFactory,  # noqa: F811
    collections: list[int],
) -> None:
    emulator = emulator_factory(hubs={"cut": 2})
    async with FaultProxy("127.0.0.1", emulator.port, seed=0) as proxy:
        hub = EventHub.from_connection_string(
            emulator.connection_string("cut"), custom_endpoint_address=f"sb://{proxy.address}",
            management_timeout=1.0, retry_total=0,
        )
        try:
            assert await hub.get_partition_ids() == ["0", "1"]  # the path works, and the hub knows its partitions
            proxy.blackhole()
            for _ in range(3):
                with pytest.raises(TransportError, match=r"no answer within 1 s"):
                    await hub.get_partition_ids()
            await asyncio.sleep(0.5)  # the cut-off tasks are done and their callbacks ran
            # the fault was felt: three more connections, each cut off before its handshake ended
            assert proxy.stats.connections_accepted >= 4, proxy.stats
            assert proxy.stats.bytes_dropped_up > 0, proxy.stats
            assert collections == [], f"a cut-off call ran {len(collections)} garbage collections"
        finally:
            await hub.close()
    # the calls still hanging on the dark path were cancelled at close, and one collection closed what they left
    assert collections == [2], collections
