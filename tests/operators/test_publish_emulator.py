"""hops.publish over the emulator, with the real azure-eventhub client on both sides: hub A to hub B with a
transform (keys kept, order per key, checkpoints only after acknowledgement), targets that refuse (an unknown
hub, an event over the size limit) and dead letters; and a consumer killed with SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs import operators as hops
from rxhubs.errors import ConfigurationError, NotFoundError, PublishError
from rxhubs.stores import InMemoryCheckpointStore

ROOT = Path(__file__).resolve().parents[2]
FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0, "max_wait": 0.2}
KEYS = [f"key-{k}" for k in range(8)]


async def read_all(hub: rxhubs.EventHub, expected: int, timeout: float = 30.0) -> list[rxhubs.Event]:
    """Every event of every partition of ``hub``, once there are at least ``expected`` (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        ids = await hub.get_partition_ids()
        sizes = await asyncio.gather(*(hub.get_partition_properties(p) for p in ids))
        total = sum(p.last_enqueued_sequence_number + 1 for p in sizes)
        if total >= expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)

    async def partition(pid: str, want: int) -> list[rxhubs.Event]:
        async with hub.receiver(pid, start=rxhubs.Position.earliest()) as receiver:
            got: list[rxhubs.Event] = []
            while len(got) < want:
                got += await receiver.receive_batch(1000, max_wait=2.0)
            return got

    # in partition order (receivers open concurrently: each attach is a round trip)
    wants = [props.last_enqueued_sequence_number + 1 for props in sizes]
    parts = await asyncio.gather(*(partition(p, want) for p, want in zip(ids, wants, strict=True)))
    return [event for events in parts for event in events]


class RecordingTarget:
    """The real target hub, noting per source partition what it acknowledged (source positions in ``src``)."""

    def __init__(self, hub: rxhubs.EventHub) -> None:
        self.hub, self.eventhub_name = hub, hub.eventhub_name
        self.acked: dict[str, set[int]] = defaultdict(set)

    async def publish(
        self, events: Sequence[hops.OutgoingEvent], *, partition_id: str | None = None, partition_key: str | None = None
    ) -> None:
        await self.hub.publish(events, partition_id=partition_id, partition_key=partition_key)
        for event in events:
            pid, seq = event.properties["src"].split(":")
            self.acked[pid].add(int(seq))


class CheckedStore(InMemoryCheckpointStore):
    """Notes, at every checkpoint write, whether every event of the partition up to it was acknowledged."""

    def __init__(self, target: RecordingTarget) -> None:
        super().__init__()
        self.target = target
        self.early: list[Checkpoint] = []
        self.writes = 0

    def _check(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        acked = self.target.acked[checkpoint.partition_id]
        if any(s not in acked for s in range(checkpoint.sequence_number + 1)):
            self.early.append(checkpoint)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._check(checkpoint)
        await super().update_checkpoint(checkpoint)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self._check(checkpoint)  # the checkpoint operator writes fenced where the store can
        await super().update_checkpoint_fenced(checkpoint, ownership)


def unknown_hub(emulator: Any) -> str:
    """A connection string to the emulator's namespace, for a hub it does not have."""
    conn = emulator.connection_string("a")
    assert "EntityPath=a" in conn
    return conn.replace("EntityPath=a", "EntityPath=nope")


async def run_until(pipeline: Any, done: Any, timeout: float = 30.0) -> None:
    stop = rxhubs.Shutdown()
    runner = asyncio.get_running_loop().create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not runner.done():
        if await done():
            break
        await asyncio.sleep(0.1)
    stop.request()
    await runner


async def test_hub_to_hub_with_a_transform_keeps_keys_and_order_and_checkpoints_after_acks(
    emulator_factory: Any,
) -> None:
    emulator = emulator_factory(hubs={"a": 4, "b": 4})
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    target = rxhubs.EventHub.from_connection_string(emulator.connection_string("b"))
    try:
        await asyncio.gather(*(source.send([f"{key}/{n}" for n in range(40)], partition_key=key) for key in KEYS))
        partition_of: dict[int, str] = {}

        def remember(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
            partition_of.update((id(e), batch.partition_id) for e in batch)
            return batch

        recording = RecordingTarget(target)
        store = CheckedStore(recording)
        pipeline = rxhubs.consume(source, "$Default", store, max_batch_size=15, **FAST).pipe(
            ops.map(remember),
            hops.publish(
                recording,
                body=lambda e: e.body.upper(),
                properties=lambda e: {"src": f"{partition_of.pop(id(e))}:{e.sequence_number}"},
            ),
            hops.checkpoint(store, max_interval=0.2),
        )

        async def all_checkpointed() -> bool:
            written = store.peek(source.fully_qualified_namespace, "a", "$Default")[1]
            return sum(c.sequence_number + 1 for c in written) == 40 * len(KEYS)

        await run_until(pipeline, all_checkpointed)
        published = await read_all(target, 40 * len(KEYS))
    finally:
        await source.close()
        await target.close()

    by_key: dict[str, list[bytes]] = defaultdict(list)
    for event in published:
        assert event.partition_key is not None and event.body.startswith(event.partition_key.upper().encode())
        by_key[event.partition_key].append(event.body)
    assert by_key == {k: [f"{k}/{n}".upper().encode() for n in range(40)] for k in KEYS}
    assert store.writes >= 4 and store.early == []


async def test_an_unknown_target_hub_fails_each_partition_with_a_publish_error_and_loses_nothing(
    emulator_factory: Any,
) -> None:
    emulator = emulator_factory(hubs={"a": 4})
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    missing = rxhubs.EventHub.from_connection_string(unknown_hub(emulator), retry_total=0)
    errors: list[tuple[str, str, BaseException]] = []
    store = InMemoryCheckpointStore()
    try:
        await asyncio.gather(*(source.send([b"x", b"y"], partition_id=pid) for pid in "0123"))
        pipeline = rxhubs.consume(
            source, "$Default", store, on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation, e)),
            **FAST,
        ).pipe(hops.publish(missing), hops.checkpoint(store, max_interval=0.0))

        async def every_partition_failed() -> bool:
            return {pid for pid, op, _ in errors if op == "publish"} == {"0", "1", "2", "3"}

        await run_until(pipeline, every_partition_failed)
    finally:
        await source.close()
        await missing.close()

    failures = [(pid, e) for pid, op, e in errors if op == "publish"]
    assert {pid for pid, _ in failures} == {"0", "1", "2", "3"}
    for pid, error in failures:
        assert isinstance(error, PublishError) and error.partition_id == pid and not error.retriable
        assert f"partition {pid}" in str(error) and isinstance(error.__cause__, NotFoundError)
    assert store.peek(source.fully_qualified_namespace, "a", "$Default")[1] == []  # all to be read again


async def test_an_event_over_the_size_limit_stops_only_its_partition(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"a": 4, "b": 4})
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    target = rxhubs.EventHub.from_connection_string(emulator.connection_string("b"))
    errors: list[tuple[str, str, BaseException]] = []
    store = InMemoryCheckpointStore()
    try:
        await asyncio.gather(*(source.send([f"{pid}-{n}" for n in range(5)], partition_id=pid) for pid in "0123"))
        # 600 KB in the source; 1.2 MB once the transform doubled it: over the target's 1 MiB limit
        await source.send([b"z" * 600_000], partition_id="2")
        await source.send([b"after"], partition_id="2")
        pipeline = rxhubs.consume(
            source, "$Default", store, on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation, e)),
            **FAST,
        ).pipe(hops.publish(target, body=lambda e: e.body * 2), hops.checkpoint(store, max_interval=0.0))

        async def others_done_and_two_failed() -> bool:
            done = {c.partition_id for c in store.peek(source.fully_qualified_namespace, "a", "$Default")[1]}
            return done >= {"0", "1", "3"} and any(op == "publish" for _, op, _ in errors)

        await run_until(pipeline, others_done_and_two_failed)
        published = await read_all(target, 15, timeout=5.0)
    finally:
        await source.close()
        await target.close()

    failures = [(pid, e) for pid, op, e in errors if op == "publish"]
    assert failures and {pid for pid, _ in failures} == {"2"}
    error = failures[0][1]
    assert isinstance(error, PublishError) and error.partition_id == "2" and "partition 2" in str(error)
    assert isinstance(error.__cause__, ConfigurationError) and "maximum message size" in str(error)
    checkpoints = {c.partition_id: c.sequence_number for c in store.peek(source.fully_qualified_namespace, "a",
                                                                          "$Default")[1]}
    assert checkpoints.get("2", -1) < 5 and {checkpoints[p] for p in "013"} == {4}  # the big one is not passed
    bodies = {e.body for e in published}
    assert {f"{p}-{n}".encode() * 2 for p in "013" for n in range(5)} <= bodies  # the other partitions went on
    assert bodies <= {f"{p}-{n}".encode() * 2 for p in "0123" for n in range(5)}  # nothing big, nothing after it


async def test_dead_letter_sends_the_failed_events_with_error_and_position(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"a": 2, "dlq": 1})
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    dlq = rxhubs.EventHub.from_connection_string(emulator.connection_string("dlq"))
    missing = rxhubs.EventHub.from_connection_string(unknown_hub(emulator), retry_total=0)
    store = InMemoryCheckpointStore()
    try:
        await source.send([b"p", b"q"], partition_key="device-1")
        sent = await read_all(source, 2)
        pipeline = rxhubs.consume(source, "$Default", store, **FAST).pipe(
            hops.publish(missing, on_poison=hops.dead_letter(dlq)), hops.checkpoint(store, max_interval=0.0)
        )

        async def checkpointed() -> bool:
            return bool(store.peek(source.fully_qualified_namespace, "a", "$Default")[1])

        await run_until(pipeline, checkpointed)
        dead = await read_all(dlq, 2)
    finally:
        await source.close()
        await dlq.close()
        await missing.close()

    assert [e.body for e in dead] == [b"p", b"q"] and {e.partition_key for e in dead} == {"device-1"}
    [pid] = {c.partition_id for c in store.peek(source.fully_qualified_namespace, "a", "$Default")[1]}
    for event, original in zip(dead, sent, strict=True):
        props = event.properties
        assert props["rxhubs.error.type"] == "PublishError" and "nope" in props["rxhubs.error.message"]
        assert props["rxhubs.source.eventhub"] == "a" and props["rxhubs.source.consumer_group"] == "$Default"
        assert props["rxhubs.source.partition_id"] == pid
        assert props["rxhubs.source.sequence_number"] == original.sequence_number
        assert props["rxhubs.source.offset"] == original.offset


class KeyedProducer(threading.Thread):
    """Sends ``key-K/N`` to hub A with partition key ``key-K``, in small batches, until stopped."""

    def __init__(self, connection_string: str) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.stop = threading.Event()
        self.sent: dict[str, int] = defaultdict(int)
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                while not self.stop.is_set():
                    for key in KEYS:
                        batch = producer.create_batch(partition_key=key)
                        for _ in range(10):
                            batch.add(EventData(f"{key}/{self.sent[key]}"))
                            self.sent[key] += 1
                        producer.send_batch(batch)
                    time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _start(out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.operators.publish_proc", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE, stderr=open(out.with_suffix(".err"), "w"), text=True,  # noqa: SIM115
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", out.with_suffix(".err").read_text()
    return proc


def _wait_for_ack(out: Path, timeout: float = 60.0) -> None:
    """Until the consumer writing ``out`` has published a batch (bounded: the asserts below tell what was missing)."""
    deadline = time.monotonic() + timeout
    while not _lines(out, "ACK") and time.monotonic() < deadline:
        time.sleep(0.1)


def _lines(out: Path, kind: str) -> list[tuple[str, str, float]]:
    rows = []
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == kind:
            rows.append((parts[1], parts[2], float(parts[3])))
    return rows


@pytest.mark.slow
def test_a_consumer_killed_mid_stream_and_restarted_publishes_every_event_in_order(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"a": 4, "b": 4})
    env = {
        "RXHUBS_TEST_SOURCE": emulator.connection_string("a"),
        "RXHUBS_TEST_TARGET": emulator.connection_string("b"),
        "RXHUBS_TEST_STORE": f"sqlite:///{tmp_path / 'cp.sqlite'}",
    }
    outs = [tmp_path / "first.log", tmp_path / "second.log"]
    producer = KeyedProducer(env["RXHUBS_TEST_SOURCE"])
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(_start(outs[0], env))
        producer.start()
        _wait_for_ack(outs[0])  # mid-stream: it published something (a fixed sleep is too short on a busy machine)
        time.sleep(1.0)
        procs[0].send_signal(signal.SIGKILL)
        assert procs[0].wait(timeout=10) == -signal.SIGKILL
        killed_acks = len(_lines(outs[0], "ACK"))
        procs.append(_start(outs[1], env))
        _wait_for_ack(outs[1])
        time.sleep(1.0)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = sum(producer.sent.values())

        async def published() -> list[rxhubs.Event]:  # replays duplicate: a count reached may lack the tail
            deadline = time.monotonic() + 40.0
            async with rxhubs.EventHub.from_connection_string(env["RXHUBS_TEST_TARGET"]) as target:
                while True:
                    got = await read_all(target, expected, timeout=40.0)
                    if len({e.body for e in got}) >= expected or time.monotonic() > deadline:
                        return got
                    await asyncio.sleep(0.5)

        events = asyncio.run(published())
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 0, outs[1].with_suffix(".err").read_text()[-3000:]
    finally:
        producer.stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert killed_acks > 0 and _lines(outs[1], "ACK")  # both consumers published: the kill came mid-stream
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        key, n = event.body.decode().split("/")
        assert event.partition_key is not None and key == event.partition_key.upper()  # transformed, key kept
        by_key[event.partition_key].append(int(n))
    for key in KEYS:
        numbers = by_key[key]
        first_seen = list(dict.fromkeys(numbers))
        assert first_seen == list(range(producer.sent[key])), key  # every event, in order (duplicates aside)
        rewinds = [i for i in range(1, len(numbers)) if numbers[i] <= numbers[i - 1]]
        assert len(rewinds) <= 1, (key, rewinds)  # a replay after the kill, at most once
    # every checkpoint write: each event of its partition up to it had been acknowledged by the target before
    acked_at: dict[tuple[str, int], float] = {}
    for out in outs:
        for pid, seqs, at in _lines(out, "ACK"):
            for seq in map(int, seqs.split(",")):
                acked_at[(pid, seq)] = min(at, acked_at.get((pid, seq), at))
    checkpoints = [(pid, int(seq), at) for out in outs for pid, seq, at in _lines(out, "CP")]
    assert len(checkpoints) >= 8
    for pid, seq, at in checkpoints:
        early = [s for s in range(seq + 1) if acked_at.get((pid, s), float("inf")) > at]
        assert early == [], f"checkpoint {pid}@{seq} written before {early[:5]} were acknowledged"


async def test_a_producer_client_of_the_sdk_is_a_target_and_a_sync_one_is_refused(emulator_factory: Any) -> None:
    from azure.eventhub import EventHubProducerClient as SyncProducer
    from azure.eventhub.aio import EventHubProducerClient

    emulator = emulator_factory(hubs={"a": 1, "b": 2})
    sync_producer = SyncProducer.from_connection_string(emulator.connection_string("b"))
    with sync_producer, pytest.raises(ConfigurationError, match="async producer"):
        hops.publish(sync_producer)
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    producer = EventHubProducerClient.from_connection_string(emulator.connection_string("b"))
    target = rxhubs.EventHub.from_connection_string(emulator.connection_string("b"))
    store = InMemoryCheckpointStore()
    try:
        await source.send([b"m", b"n"], partition_key="k")
        pipeline = rxhubs.consume(source, "$Default", store, **FAST).pipe(
            hops.publish(producer, properties={"via": "sdk"}), hops.checkpoint(store, max_interval=0.0)
        )

        async def checkpointed() -> bool:
            return [c.sequence_number for c in store.peek(source.fully_qualified_namespace, "a", "$Default")[1]] == [1]

        await run_until(pipeline, checkpointed)
        published = await read_all(target, 2)
    finally:
        await source.close()
        await target.close()
        await producer.close()  # the producer stays the caller's: publish did not close it
    assert [(e.body, e.partition_key, e.properties.get("via")) for e in published] == [
        (b"m", "k", "sdk"), (b"n", "k", "sdk"),
    ]
