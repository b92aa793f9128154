"""The network-fault tests' kit: a FaultProxy on a thread of its own, a producer that dates its sends, the checks.

The shape every test in ``test_network_faults.py`` shares (:class:`Run`): an emulator in process, two consumers
sharing a SQLite store (``a`` reads through a :class:`~rxhubs.testing.FaultProxy`, ``b`` straight from the
emulator), and a producer sending numbered events straight to the emulator. Once each consumer reads its share of
the partitions, the test breaks ``a``'s network for a few seconds and heals it; then every event sent must have
been processed, in order, and ``b`` must have kept reading its partitions meanwhile.

The consumers renew every second, as in the other fault tests, but their ownership expires after
:data:`EXPIRY` (6 s) rather than 3 s: while ``a``'s hub path is broken, each of its balancing rounds spends up
to one interval (the store timeout) failing to re-read the partition ids before it renews, so a renewal lands
up to two intervals plus two rounds' store calls after the one before. With a 3 s expiry that left one second
for the store calls and the loop's scheduling, which a loaded machine (load 10 on two cores) overran: ``a``
gave its partitions up, took them back and replayed from its checkpoint (the duplicates seen at ``-n 8``).
What the tests check of that path is that ``a`` kept renewing during the fault (:meth:`Run.check`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

from rxhubs import CloseReason, EventHub
from rxhubs.stores import SqliteCheckpointStore
from rxhubs.testing import FaultProxy
from tests.faults.kit import Consumer, account, live_owners, wait_until

__all__ = ["LoopThread", "Producer", "Run", "in_order", "through"]

T = TypeVar("T")

PARTITIONS = 4
#: Seconds without renewal before a record expires (the renewals stay one second apart).
EXPIRY = 6.0


def through(proxy: FaultProxy) -> dict[str, str]:
    """EventHub options that connect through ``proxy``, keeping the namespace (so ownership is shared)."""
    return {"custom_endpoint_address": f"sb://{proxy.address}"}


class LoopThread(threading.Thread):
    """An event loop on its own thread, for what must live on one (the proxy), driven from the test's thread."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="fault-proxy")
        self.loop = asyncio.new_event_loop()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(10)
        self.loop.close()


@contextmanager
def proxy_to(port: int, seed: int = 0) -> Iterator[FaultProxy]:
    """A started FaultProxy toward ``127.0.0.1:port``, served from its own thread; stopped on exit."""
    thread = LoopThread()
    thread.start()
    proxy = FaultProxy("127.0.0.1", port, seed=seed)
    try:
        thread.call(proxy.start())
        yield proxy
    finally:
        try:
            thread.call(proxy.stop())
        finally:
            thread.close()


@dataclass
class Sent:
    """One batch the service accepted: partition, first sequence number, count, when its send began."""

    partition_id: str
    first: int
    count: int
    started_at: float


class Producer(threading.Thread):
    """Sends batches of numbered events to every partition, straight to the hub, until stopped.

    The hub is fresh, so the n-th event a partition accepted has sequence number n. Each batch records when its
    send began: an event of a batch begun after ``t`` reached the service after ``t``.
    """

    def __init__(self, connection_string: str, *, per_batch: int = 10, pause: float = 0.05,
                 body_size: int = 0) -> None:
        super().__init__(daemon=True, name="producer")
        self.connection_string = connection_string
        self.per_batch = per_batch
        self.pause = pause
        self.body_size = body_size
        self.stop = threading.Event()
        self.sent: dict[str, int] = defaultdict(int)
        self.batches: list[Sent] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                while not self.stop.is_set():
                    for pid in map(str, range(PARTITIONS)):
                        first = self.sent[pid]
                        batch = producer.create_batch(partition_id=pid)
                        for seq in range(first, first + self.per_batch):
                            batch.add(EventData(f"{pid}-{seq}".ljust(self.body_size, ".")))
                        started = time.time()
                        producer.send_batch(batch)
                        self.batches.append(Sent(pid, first, self.per_batch, started))
                        self.sent[pid] += self.per_batch
                    time.sleep(self.pause)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.join(30)
        assert self.error is None, self.error
        assert not self.is_alive(), "the producer did not stop"
        return dict(self.sent)

    def sent_at(self) -> dict[tuple[str, int], float]:
        """(partition, sequence number) -> when the send of its batch began."""
        return {(b.partition_id, b.first + i): b.started_at for b in list(self.batches) for i in range(b.count)}


def in_order(consumer: Consumer, partitions: Iterable[str]) -> None:
    """Each partition's events reached ``consumer`` in sequence, each one after the one before (no gap, no repeat)."""
    by_partition: dict[str, list[int]] = defaultdict(list)
    for pid, seq, _, _ in consumer.snapshot():
        by_partition[pid].append(seq)
    for pid in partitions:
        seqs = by_partition[pid]
        breaks = [(a, b) for a, b in pairwise(seqs) if b != a + 1]
        assert not breaks, f"{consumer.owner} read partition {pid} out of sequence at {breaks[:5]}"


@dataclass
class Run:
    """Two consumers on a shared SQLite store: ``a`` through ``proxy``, ``b`` straight; one producer.

    Use as a context manager; :meth:`settle` waits until each consumer owns and reads its share.
    """

    connection_string: str
    proxy: FaultProxy
    tmp_path: Path
    producer: Producer
    options: dict[str, Any] = field(default_factory=dict)
    a: Consumer = field(init=False)
    b: Consumer = field(init=False)
    a_partitions: set[str] = field(default_factory=set)
    b_partitions: set[str] = field(default_factory=set)
    closed_before: tuple[int, int] = (0, 0)
    renewed: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: Every renewal of a partition's record the store showed, sampled all through the run: (partition, owner,
    #: last_modified_time). A renewal read after the heal cannot vouch for renewing during the fault; these can.
    renewal_log: set[tuple[str, str, float]] = field(default_factory=set)
    #: The longest gap allowed between two of a's renewals around the fault, as the store stamps them (default:
    #: two thirds of the expiry, where a consumer stops reading a partition it could not renew).
    renewal_gap: float | None = None

    def __post_init__(self) -> None:
        path = self.tmp_path / "cp.sqlite"
        self.store_factory: Callable[[], Any] = lambda: SqliteCheckpointStore(path)
        options = {"ownership_expiration": EXPIRY, **self.options}
        self.a = Consumer("a", self.connection_string, self.store_factory, hub_options=through(self.proxy),
                          **options)
        self.b = Consumer("b", self.connection_string, self.store_factory, **options)

    def __enter__(self) -> Run:
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True, name="renewals")
        self.beats: list[float] = []
        threading.Thread(target=self._beat, daemon=True, name="heartbeat").start()
        self.a.start_and_wait()
        self.b.start_and_wait()
        self._sampler.start()
        self.producer.start()
        self.settle()
        return self

    def _beat(self) -> None:
        """Note the time every 20 ms: a gap here is the whole process stalled (the machine), not the library."""
        while not self._sampling.is_set():
            self.beats.append(time.time())
            time.sleep(0.02)

    def _sample(self) -> None:
        """List the ownership records every 0.1 s (a renewal stands 1 s: none is missed) until the run ends."""

        async def main() -> None:
            hub = EventHub.from_connection_string(self.connection_string)
            namespace, name = hub.fully_qualified_namespace, hub.eventhub_name
            await hub.close()
            store = self.store_factory()
            try:
                while not self._sampling.is_set():
                    try:
                        records = await store.list_ownership(namespace, name, "$Default")
                    except Exception:  # a sample missed (SQLite busy): the next one is 0.1 s away
                        records = []
                    self.renewal_log.update((o.partition_id, o.owner_id, o.last_modified_time or 0.0)
                                            for o in records if o.partition_id.isdigit())
                    await asyncio.sleep(0.1)
            finally:
                await store.close()

        asyncio.run(main())

    def __exit__(self, *exc: object) -> None:
        self._sampling.set()
        self._sampler.join(10)
        self.producer.stop.set()
        for consumer in (self.a, self.b):
            if consumer.is_alive():
                consumer.stop()

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until a and b own two partitions each and both read all of theirs."""

        def settled() -> bool:
            owners = live_owners(self.connection_string, self.store_factory)
            self.a_partitions = {p for p, o in owners.items() if o == "a"}
            self.b_partitions = {p for p, o in owners.items() if o == "b"}
            if len(self.a_partitions) != PARTITIONS // 2 or len(self.b_partitions) != PARTITIONS // 2:
                return False
            since = time.time() - 0.3
            return all(self.reading(c, ps, since) for c, ps in ((self.a, self.a_partitions),
                                                                   (self.b, self.b_partitions)))

        assert wait_until(settled, timeout, step=0.3), (self.a_partitions, self.b_partitions)
        self.closed_before = (len(self.a.closed), len(self.b.closed))

    @staticmethod
    def reading(consumer: Consumer, partitions: Iterable[str], since: float, until: float = float("inf")) -> bool:
        """Whether ``consumer`` processed events of every one of ``partitions`` between ``since`` and ``until``."""
        got = {p for p, _, _, at in consumer.snapshot() if since <= at <= until}
        return set(partitions) <= got

    def around(self, since: float, until: float, origin: float) -> str:
        """What each consumer read and the producer sent per partition around ``since``-``until`` (a failure's why)."""

        def near(times: Iterable[float]) -> str:
            inside = sorted(t - origin for t in times if since - 1.0 <= t <= until + 1.0)
            return " ".join(f"{t:.2f}" for t in inside[:: max(1, len(inside) // 12)])

        lines = []
        for pid in sorted(self.a_partitions | self.b_partitions):
            sent = [b.started_at for b in list(self.producer.batches) if b.partition_id == pid]
            lines.append(f"partition {pid}: sent at [{near(sent)}]")
            for consumer in (self.a, self.b):
                read = [at for p, _, _, at in consumer.snapshot() if p == pid]
                if read:
                    lines.append(f"  {consumer.owner} read at [{near(read)}]")
        beats = [t for t in self.beats if since - 1.0 <= t <= until + 1.0]
        stalls = [(a - origin, b - a) for a, b in pairwise(beats) if b - a > 0.1]
        lines.append("the process stalled (from, for): " + (", ".join(f"{a:.2f} {g:.2f}" for a, g in stalls) or "no"))
        return "seconds into the fault:\n" + "\n".join(lines)

    def renewals(self) -> dict[str, tuple[str, float]]:
        """Partition -> (owner, when its record was last renewed), as the store has it now."""

        async def read() -> dict[str, tuple[str, float]]:
            hub = EventHub.from_connection_string(self.connection_string)
            store = self.store_factory()
            try:
                records = await store.list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
            finally:
                await store.close()
                await hub.close()
            return {o.partition_id: (o.owner_id, o.last_modified_time or 0.0) for o in records
                    if o.partition_id.isdigit()}

        return asyncio.run(read())

    def drain(self, timeout: float = 60.0) -> set[tuple[str, int]]:
        """Stop the producer, wait for every event sent to be processed, stop the consumers; the events sent."""
        self.renewed = self.renewals()  # at the heal, before anything is released
        sent = self.producer.finish()
        expected = {(pid, seq) for pid, n in sent.items() for seq in range(n)}

        def processed() -> set[tuple[str, int]]:
            return {(p, s) for c in (self.a, self.b) for p, s, _, _ in c.snapshot()}

        assert wait_until(lambda: expected <= processed(), timeout), (
            f"{len(expected - processed())} of {len(expected)} events not processed yet "
            f"(a errors: {self.a.errors[-3:]})"
        )
        for consumer in (self.a, self.b):
            consumer.stop()
            assert consumer.outcome is None, consumer.outcome
        # a closed every connection it opened through the proxy (none left behind by an abandoned call)
        assert wait_until(lambda: self.proxy.stats.connections_open == 0, 10), self.proxy.stats
        return expected

    def check(self, expected: set[tuple[str, int]], fault_from: float, fault_to: float) -> None:
        """Nothing lost, nothing repeated, in order; b read each of its partitions all through the fault."""
        duplicates = account(expected, [self.a, self.b])
        assert not duplicates, (sum(duplicates.values()), sorted(duplicates)[:10])
        in_order(self.a, self.a_partitions)
        in_order(self.b, self.b_partitions)
        # the other consumer was not disturbed: it kept its partitions and read each of them in every second
        step = 1.0
        at = fault_from
        while at + step <= fault_to:
            assert self.reading(self.b, self.b_partitions, at, at + step), (
                f"b read nothing of some of {sorted(self.b_partitions)} between "
                f"{at - fault_from:.1f} s and {at + step - fault_from:.1f} s into the fault; "
                + self.around(at, at + step, fault_from)
            )
            at += step
        rows = self.a.snapshot()
        resumed = min((at for p, _, _, at in rows if at >= fault_to and p in self.a_partitions), default=None)
        print(f"a: {len(self.a.errors)} errors, {sum(fault_from <= r[3] <= fault_to for r in rows)} events read "
              f"during the fault, first event {resumed - fault_to if resumed else None} s after the heal; "
              f"{self.proxy.stats}")
        # no partition stream ended from the fault on (each error was retried), until the consumers stopped
        for consumer, n in zip((self.a, self.b), self.closed_before, strict=True):
            ended = [(p, r) for p, r in consumer.closed[n:] if r is not CloseReason.SHUTDOWN]
            assert not ended, f"{consumer.owner}: streams ended {ended}"
        # a kept renewing its partitions through the fault: its renewals do not wait on the broken path. Each of
        # its records was renewed by a inside the fault, and no two renewals (the last before the fault, those
        # during it, the first after) were two thirds of the expiry apart (where a consumer stops reading). With
        # faults of 3-5 s under a 6 s expiry, "the partitions did not move" alone would hold even if a renewed
        # nothing while its path was broken, and so would one renewal read after the heal.
        for p in sorted(self.a_partitions):
            times = sorted(at for q, owner, at in self.renewal_log if q == p and owner == "a")
            inside = [t for t in times if fault_from < t < fault_to]
            assert inside, f"a did not renew partition {p} during the fault ({fault_from:.2f}-{fault_to:.2f}): {times}"
            span = [t for t in times if t <= fault_from][-1:] + inside + [t for t in times if t >= fault_to][:1]
            gaps = [b - a for a, b in pairwise(span)]
            limit = self.renewal_gap or float(self.options.get("ownership_expiration", EXPIRY)) * 2 / 3
            assert max(gaps, default=0.0) < limit, (p, [round(g, 2) for g in gaps], limit)
        # a's partitions stayed a's: it rode the fault out rather than losing them
        moved = {p for p, _, _, at in self.b.snapshot() if p in self.a_partitions and at >= fault_from}
        assert not moved, f"a's partitions {sorted(moved)} went over to b"
