"""KEDA's Event Hubs scaler (``blobMetadata``), ported as an oracle, reads what rxhubs consumers wrote on Azurite.

Its lag must equal the real backlog: the events enqueued minus the events the group processed and checkpointed,
per partition, with 1, 2 and 3 consumers sharing the group, and for a new group started at ``latest`` with
``seed_checkpoint=True`` (without it, KEDA counts the whole retention: the trap the option removes).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.balancing import SessionState
from rxhubs.stores import BlobCheckpointStore
from tests.operate.readers import send
from tests.support import keda
from tests.support.keda import keda_lag

HUB = "metrics"
PARTITIONS = 4
FIRST = {"0": 50, "1": 40, "2": 30, "3": 20}
LATER = {"0": 7, "1": 11, "2": 13, "3": 0}


def test_the_oracle_keeps_kedas_rules() -> None:
    assert keda.blob_path("NS.servicebus.windows.net", "Hub", "$Default", "3") == (
        "NS.servicebus.windows.net/Hub/$default/checkpoint/3"
    )
    assert keda.unprocessed(last=120, checkpoint=100) == 20
    assert keda.unprocessed(last=5, checkpoint=keda.MAX_INT64 - 15) == 20  # wrapped around
    assert keda.unprocessed(last=5, checkpoint=100) == 0  # stale partition info: within the threshold
    assert keda.without_checkpoint(0, 0) == 1 and keda.without_checkpoint(10, 10) == 0
    assert keda.without_checkpoint(100, 149) == 50
    assert keda.capped(1000, partition_count=4, threshold=64) == 256 and keda.capped(200, 4, 64) == 200
    assert keda.hub_and_namespace("Endpoint=sb://MyNS.servicebus.windows.net/;EntityPath=Telemetry") == (
        "MyNS.servicebus.windows.net", "Telemetry"
    )


async def consume_all(conn: str, storage: str, container: str, group: str, consumers: int, expected: int,
                      **options: Any) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """``consumers`` rxhubs consumers of ``group``, each checkpointing what it processed, until ``expected`` events
    were processed; then a graceful stop (each flushes its checkpoints and releases).

    Work waits until the group is balanced (every consumer was handed a partition): the first consumer's first
    round claims every partition, so without the wait it alone read (and checkpointed) the whole backlog, and "2
    and 3 consumers" showed one consumer checkpointing. A batch of a partition being handed over (its session
    draining) does its work at once: waiting would hold the very handover the group waits for until the drain
    timed out (60 s), after which the partition was released with the batch unfinished and its work never
    checkpointed (KEDA then read its events as lag). Batches of 5, one in flight: a handover leaves most of a
    partition to its new owner. Returns (partition -> sequence numbers processed, partition -> the consumers that
    processed events of it).
    """
    processed: dict[str, set[int]] = {}
    by: dict[str, set[int]] = {}
    shutdown = rxhubs.Shutdown()
    balanced = asyncio.Event()
    holding: set[int] = set()

    def handed(i: int) -> Any:
        def on_initialize(context: Any) -> None:
            holding.add(i)
            if len(holding) == consumers:
                balanced.set()

        return on_initialize

    def handing_over(batch: Any) -> bool:
        session = batch._session
        return session is not None and session.state is not SessionState.READING

    def handler(i: int) -> Any:
        async def handle(batch: Any) -> None:
            while not balanced.is_set() and not handing_over(batch):  # noqa: ASYNC110 - two conditions, one an Event
                await asyncio.sleep(0.02)
            pid = batch.context.partition_id
            processed.setdefault(pid, set()).update(e.sequence_number for e in batch.events)
            by.setdefault(pid, set()).add(i)
            if sum(map(len, processed.values())) >= expected:
                shutdown.request()

        return handle

    hubs = [rxhubs.EventHub.from_connection_string(conn) for _ in range(consumers)]
    stores = [BlobCheckpointStore.from_connection_string(storage, container) for _ in range(consumers)]
    try:
        pipelines = [
            rxhubs.consume(hub, group, store, owner_id=f"c{i}", load_balancing_interval=0.5,
                           ownership_expiration=5.0, on_partition_initialize=handed(i),
                           **{"max_batch_size": 5, "max_inflight": 1, **options}
                           ).pipe(hops.process(handler(i)), hops.checkpoint(store))
            for i, (hub, store) in enumerate(zip(hubs, stores, strict=True))
        ]
        await asyncio.gather(*(rxhubs.arun(p, shutdown=shutdown, signals=()) for p in pipelines))
    finally:
        for resource in [*stores, *hubs]:
            await resource.close()
    return processed, by


@pytest.mark.azurite
@pytest.mark.slow
@pytest.mark.parametrize("consumers", [1, 2, 3])
def test_kedas_lag_equals_the_real_backlog(
    emulator_factory: Any, azurite: Any, blob_container: str, consumers: int
) -> None:
    emulator = emulator_factory(hubs={HUB: PARTITIONS})
    conn, storage = emulator.connection_string(HUB), azurite.connection_string
    send(conn, FIRST)
    before = keda_lag(conn, storage, blob_container, "$Default")
    assert before.per_partition == FIRST and before.checkpoints == dict.fromkeys(FIRST), "no checkpoint: everything"

    processed, by = asyncio.run(
        consume_all(conn, storage, blob_container, "$Default", consumers, sum(FIRST.values())))
    # the group's consumers shared the work: each processed (and so checkpointed) partitions of its own
    assert len(set().union(*by.values())) == consumers, by
    send(conn, LATER, "later")
    backlog = {p: FIRST[p] + LATER[p] - len(processed.get(p, ())) for p in FIRST}
    assert backlog == LATER  # every first event processed once checkpointed: what the group still has to do
    reading = keda_lag(conn, storage, blob_container, "$Default", threshold=5)
    assert reading.per_partition == backlog
    assert reading.total == sum(LATER.values()) == 31
    assert reading.metric == 20, "capped at partitions x threshold, as KEDA does"


@pytest.mark.azurite
@pytest.mark.slow
def test_a_new_group_at_latest_scales_to_the_maximum_unless_seeded(
    emulator_factory: Any, azurite: Any, blob_container: str, caplog: Any
) -> None:
    emulator = emulator_factory(hubs={HUB: PARTITIONS}, consumer_groups=("seeded", "unseeded"))
    conn, storage = emulator.connection_string(HUB), azurite.connection_string
    send(conn, FIRST)

    async def start_and_stop(group: str, seed: bool) -> None:
        """Consumers at latest, stopped once each partition was claimed (nothing new arrives meanwhile)."""
        claimed: set[str] = set()
        shutdown, all_claimed = rxhubs.Shutdown(), asyncio.Event()

        def on_init(context: Any) -> None:
            claimed.add(context.partition_id)
            if len(claimed) == PARTITIONS:
                all_claimed.set()

        hub = rxhubs.EventHub.from_connection_string(conn)
        async with BlobCheckpointStore.from_connection_string(storage, blob_container) as store:
            pipeline = rxhubs.partitions(hub, group, store, default_start="@latest", seed_checkpoint=seed,
                                         load_balancing_interval=0.5, on_partition_initialize=on_init)

            async def stop_when_claimed() -> None:
                await all_claimed.wait()
                if seed:  # each seed is written before its partition reads (two management calls, then the write)
                    for _ in range(600):
                        if len(await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name,
                                                            group)) == PARTITIONS:
                            break
                        await asyncio.sleep(0.1)
                else:
                    await asyncio.sleep(1.0)  # reading started: no checkpoint comes from reading at latest either
                shutdown.request()

            stopper = asyncio.create_task(stop_when_claimed())
            await rxhubs.arun(pipeline.pipe(ops.flat_map(lambda s: s)), shutdown=shutdown, signals=())
            await stopper
        await hub.close()

    asyncio.run(start_and_stop("unseeded", seed=False))
    asyncio.run(start_and_stop("seeded", seed=True))
    assert keda_lag(conn, storage, blob_container, "unseeded").total == sum(FIRST.values()), "the trap"
    seeded = keda_lag(conn, storage, blob_container, "seeded")
    assert seeded.total == 0 and seeded.checkpoints == {p: n - 1 for p, n in FIRST.items()}
    send(conn, LATER, "later")
    assert keda_lag(conn, storage, blob_container, "seeded").per_partition == LATER


def test_a_capital_letter_in_the_hub_name_is_a_warning_at_start(caplog: Any) -> None:
    from rxhubs.testing import InMemoryEventHub

    hub = InMemoryEventHub(partition_count=1, eventhub_name="Telemetry")
    store = BlobCheckpointStore.from_connection_string("UseDevelopmentStorage=true", "checkpoints")
    with caplog.at_level(logging.WARNING, logger="rxhubs.balancing"):
        rxhubs.consume(hub, "$Default", store)
        rxhubs.consume(InMemoryEventHub(partition_count=1), "$Default", store)
        rxhubs.consume(hub, "$Default", rxhubs.stores.InMemoryCheckpointStore())
    [warning] = caplog.records
    assert warning.getMessage().startswith(
        "checkpoint blobs of inmemory.servicebus.local/Telemetry are named in lower case "
        "(inmemory.servicebus.local/telemetry, the official layout); KEDA's Event Hubs scaler"
    )
