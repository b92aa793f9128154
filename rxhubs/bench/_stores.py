"""Scenario ``stores``: checkpoint writes per second, rxhubs' blob store vs the official aio blob store.

Both stores write to the same Azurite (started here, on a free loopback port, from ``node_modules``), in the
same container, in alternating rounds (the order flips every round), each on its own consumer group so they
never touch the same blob. Two workloads:

* ``sequential``: one partition, one write at a time (each awaited): the latency-bound case;
* ``partitions8``: 8 partitions writing at once, each one write at a time: what a consumer owning several
  partitions does.

The figure is the median over the rounds of writes per second; the target is rxhubs >= 1.0x the official store.
Beside it, each side's CPU per write in this process (``cpu_ms_per_write_rxhubs`` / ``_official``: the storage
client's, signing included; the rounds alternate, so each side's CPU is its own).

``args`` is the command line's ``argparse.Namespace``; this scenario reads only ``args.quick`` and
``args.smoke`` (fewer writes and rounds) and accepts any object (``types.SimpleNamespace(quick=True)`` will do).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rxhubs._models import Checkpoint
from rxhubs.bench._report import figure, sized
from rxhubs.errors import ConfigurationError
from rxhubs.testing._azurite import Azurite

__all__ = ["run"]

NS, HUB = "bench.servicebus.windows.net", "telemetry"
BASELINE = "azure-eventhub-checkpointstoreblob-aio 1.2.0"
CONTAINER = "bench-checkpoints"

Writer = Callable[[str, int], Awaitable[None]]


def run(args: Any) -> list[dict[str, Any]]:
    """Measure both stores on a private Azurite; one figure per workload.

    Args:
        args: Anything with optional ``quick`` and ``smoke`` attributes (bool).

    Returns:
        Figures with the keys ``scenario, metric, unit, rxhubs, baseline, baseline_name, ratio, target, met``
        (plus ``rounds`` and ``writes``).

    Example:
        >>> import types
        >>> [f["metric"] for f in run(types.SimpleNamespace(quick=True))]  # doctest: +SKIP
        ['checkpoint_writes_sequential', 'checkpoint_writes_partitions8']
    """
    with Azurite() as azurite:
        return asyncio.run(_measure(azurite.connection_string, sized(args, (1000, 5), (200, 3), (20, 1))))


async def _measure(conn_str: str, size: tuple[int, int]) -> list[dict[str, Any]]:
    try:
        from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as OfficialStore
    except ImportError as exc:
        raise ConfigurationError(
            "the stores benchmark compares with the official store: pip install "
            "azure-eventhub-checkpointstoreblob-aio==1.2.0 (part of the dev extra)"
        ) from exc

    from rxhubs.stores._blob import BlobCheckpointStore

    writes, rounds = size
    async with (
        BlobCheckpointStore.from_connection_string(conn_str, CONTAINER) as ours,
        OfficialStore.from_connection_string(conn_str, CONTAINER) as official,
    ):

        async def write_ours(partition_id: str, n: int) -> None:
            await ours.update_checkpoint(Checkpoint(NS, HUB, "rxhubs", partition_id, str(n * 64), n))

        async def write_official(partition_id: str, n: int) -> None:
            await official.update_checkpoint(
                {
                    "fully_qualified_namespace": NS,
                    "eventhub_name": HUB,
                    "consumer_group": "official",
                    "partition_id": partition_id,
                    "offset": str(n * 64),
                    "sequence_number": n,
                }
            )

        await write_ours("0", 0)  # creates the container (the official store expects it to exist)
        figures = []
        for name, partitions in (("sequential", 1), ("partitions8", 8)):
            sides: dict[str, list[float]] = {"rxhubs": [], "official": []}
            cpu: dict[str, list[float]] = {"rxhubs": [], "official": []}
            pairs = [("rxhubs", write_ours), ("official", write_official)]
            for _side, writer in pairs:  # warm-up: first uploads, connections, code paths
                await _rate(writer, partitions, max(50, writes // 10))
            for round_ in range(rounds):
                for side, writer in pairs if round_ % 2 == 0 else pairs[::-1]:
                    rate, cpu_ms = await _rate(writer, partitions, writes)
                    sides[side].append(rate)
                    cpu[side].append(cpu_ms)
            figures.append(
                figure(
                    "stores",
                    f"checkpoint_writes_{name}",
                    "writes/s",
                    round(statistics.median(sides["rxhubs"]), 1),
                    round(statistics.median(sides["official"]), 1),
                    BASELINE,
                    ">= 1.0x",
                    rounds=rounds,
                    writes=writes,
                    cpu_ms_per_write_rxhubs=round(statistics.median(cpu["rxhubs"]), 3),
                    cpu_ms_per_write_official=round(statistics.median(cpu["official"]), 3),
                )
            )
        return figures


async def _rate(writer: Writer, partitions: int, writes: int) -> tuple[float, float]:
    """Writes per second of ``writes`` checkpoints over ``partitions`` concurrent sequential writers; CPU ms each."""
    per_partition = max(1, writes // partitions)

    async def partition(partition_id: str) -> None:
        for n in range(per_partition):
            await writer(partition_id, n)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(partition(str(p)) for p in range(partitions)))
    done = per_partition * partitions
    return done / (time.perf_counter() - start), (time.process_time() - cpu) * 1000 / done
