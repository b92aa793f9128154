"""Helpers of the fault tests: an in-process consumer on its own thread, and the accounting of what arrived.

A :class:`Consumer` runs ``rxhubs.consume`` + a recorder + ``hops.checkpoint`` on its own event loop, so a
test can break things (restart the emulator, stop Azurite, steal a link) from its own thread. Every event
processed is recorded as ``(partition, sequence number, owner, wall time)``; :func:`account` checks that
every event sent arrived at least once and counts the duplicates. The producer is the one of the consumer
process tests (:class:`tests.sources.test_partitions_processes.Producer`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs._shutdown import Shutdown
from tests.sources.test_partitions_processes import PARTITIONS, Producer

__all__ = ["PARTITIONS", "Consumer", "Producer", "account", "expected_from", "live_owners", "seen", "wait_until"]

INTERVAL = 1.0
EXPIRY = 3.0
CHECKPOINT_INTERVAL = 0.5

Row = tuple[str, int, str, float]


class Consumer(threading.Thread):
    """``consume`` -> record -> (``middle`` operators) -> ``checkpoint``, on a loop of its own thread."""

    def __init__(
        self,
        name: str,
        connection_string: str,
        store_factory: Callable[[], Any],
        *,
        middle: Iterable[Callable[[Any], Any]] = (),
        after_checkpoint: Iterable[Callable[[Any], Any]] = (),
        hub_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(daemon=True, name=f"consumer-{name}")
        self.owner = name
        self.connection_string = connection_string
        self.store_factory = store_factory
        self.middle = list(middle)
        self.after_checkpoint = list(after_checkpoint)
        self.hub_options = dict(hub_options or {})
        self.options = {
            "owner_id": name,
            "load_balancing_interval": INTERVAL,
            "ownership_expiration": EXPIRY,
            "max_wait": 0.2,
            **options,
        }
        self.rows: list[Row] = []
        self.committed: list[Row] = []  # what passed every operator up to the checkpoint
        self.errors: list[tuple[str, BaseException]] = []
        self.operations: list[tuple[str, BaseException]] = []  # (ErrorContext.operation, error), as reported
        self.closed: list[tuple[str, Any]] = []
        self.outcome: BaseException | None = None
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: Shutdown | None = None
        self._ready = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the test
            self.outcome = exc
        finally:
            self.finished.set()
            self._ready.set()

    async def _main(self) -> None:
        hub = rxhubs.EventHub.from_connection_string(self.connection_string, **self.hub_options)
        store = self.store_factory()
        self._loop = asyncio.get_running_loop()
        self._shutdown = Shutdown()

        def record(batch: rxhubs.EventBatch, into: list[Row]) -> None:
            now = time.time()
            with self._lock:
                into.extend((batch.partition_id, e.sequence_number, self.owner, now) for e in batch.events)

        def on_error(context: Any, error: BaseException) -> None:
            self.errors.append((context.partition_id, error))
            self.operations.append((context.operation, error))

        def on_close(context: Any, reason: Any) -> None:
            self.closed.append((context.partition_id, reason))

        pipeline = rxhubs.consume(
            hub, "$Default", store, on_partition_error=on_error, on_partition_close=on_close, **self.options
        ).pipe(
            ops.do_action(lambda b: record(b, self.rows)),
            *self.middle,
            ops.do_action(lambda b: record(b, self.committed)),
            hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL),
            *self.after_checkpoint,
        )
        self._ready.set()
        try:
            await rxhubs.arun(pipeline, shutdown=self._shutdown, signals=(), grace=20.0)
        finally:
            await hub.close()
            close = getattr(store, "close", None)
            if close is not None:
                await close()

    def start_and_wait(self) -> Consumer:
        self.start()
        assert self._ready.wait(30), "the consumer did not start"
        return self

    def stop(self, timeout: float = 40.0) -> None:
        """Graceful stop (as on SIGTERM); waits for the pipeline to complete."""
        if self._loop is not None and self._shutdown is not None and not self.finished.is_set():
            self._loop.call_soon_threadsafe(self._shutdown.request)
        self.join(timeout)
        assert not self.is_alive(), f"{self.owner} did not stop within {timeout} s"

    def snapshot(self) -> list[Row]:
        with self._lock:
            return list(self.rows)


def live_owners(connection_string: str, store_factory: Callable[[], Any], expiry: float = EXPIRY) -> dict[str, str]:
    """Partition -> owner, as the store has it now (unexpired, unreleased records of real partitions)."""

    async def read() -> dict[str, str]:
        hub = rxhubs.EventHub.from_connection_string(connection_string)
        store = store_factory()
        try:
            records = await store.list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
        finally:
            await store.close()
            await hub.close()
        now = time.time()
        return {
            o.partition_id: o.owner_id
            for o in records
            if o.owner_id
            and o.partition_id.isdigit()
            and o.last_modified_time
            and now - o.last_modified_time < expiry
        }

    return asyncio.run(read())


def expected_from(sent: Mapping[str, int], first: Mapping[str, int] | None = None) -> set[tuple[str, int]]:
    """Every (partition, sequence number) the producer had accepted, from ``first`` (default 0)."""
    first = first or {}
    return {(pid, seq) for pid, n in sent.items() for seq in range(first.get(pid, 0), n)}


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def seen(consumers: Iterable[Consumer]) -> set[tuple[str, int]]:
    return {(pid, seq) for c in consumers for pid, seq, _, _ in c.snapshot()}


def account(expected: set[tuple[str, int]], consumers: Iterable[Consumer]) -> Counter[tuple[str, int]]:
    """Assert nothing expected is missing; return how many times each event was processed beyond the first."""
    counts: Counter[tuple[str, int]] = Counter()
    for consumer in consumers:
        counts.update((pid, seq) for pid, seq, _, _ in consumer.snapshot())
    missing = sorted(expected - set(counts))
    assert missing == [], f"{len(missing)} events never processed, e.g. {missing[:10]}"
    return Counter({k: n - 1 for k, n in counts.items() if n > 1})
