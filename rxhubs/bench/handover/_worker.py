"""One consumer of the ``handover`` scenario: the official processor or rxhubs, recording what it processed.

Connection strings come from RXHUBS_BENCH_EVENTHUB / RXHUBS_BENCH_STORAGE. It runs until SIGTERM (rxhubs:
graceful stop; the SDK: close), then writes to --out a JSON object: ``processed`` (partition, sequence number,
wall time) for each event, ``claims`` and ``closes`` (wall times per partition, from the
``on_partition_initialize`` and ``on_partition_close`` hooks), ``started`` (wall time the process began),
``store_calls`` (HTTP requests to the storage account, counted in the storage client's pipeline by its
``raw_request_hook``, every retry included) and ``requests`` (the same, by method and kind of blob),
``connections`` (TCP connections this process held to the hub at SIGTERM), and the steps of each handover as
the store and the receiver saw them (wall times per partition): ``won`` (a claim returned the partition as this
consumer's), ``released`` (a claim returned it with no owner, or another's), ``seen_released`` (a listing
showed it with no owner, or handed to this consumer), ``checkpoint_reads`` (every ``list_checkpoints``
answer), ``fenced`` (rxhubs: the blob store's ``fence`` answered, which also read the checkpoint), ``opened``
(rxhubs: the receiver's link attached), ``delivered`` (a batch reached the user's function, before its work).

Each side runs its store as users pass it: rxhubs gets ``rxhubs.stores.BlobCheckpointStore`` itself (a subclass
that only notes the answers of its verbs, so it keeps the fence), the official processor the official
``BlobCheckpointStore`` behind a proxy that notes the answers (it checks nothing by type). ``--unfenced`` runs the
rxhubs side on a plain ``CheckpointStore`` around the blob store instead, without the fence, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections import defaultdict
from typing import Any, cast
from urllib.parse import urlparse

from rxhubs.bench.handover._diagnostics import diagnostics

STARTED = time.time()

INTERVAL = float(os.environ.get("RXHUBS_BENCH_INTERVAL", "2.0"))  # ``scale --real`` gives its own for large hubs
EXPIRY = float(os.environ.get("RXHUBS_BENCH_EXPIRY", "6.0"))  # ``scale --real`` gives its own (12 s)
CHECKPOINT_S = float(os.environ.get("RXHUBS_BENCH_CHECKPOINT_INTERVAL", "1.0"))  # ``scale --real``: 5 s
WORK_S = 0.02  # per batch, so a batch is in flight when ownership moves
#: Each storage request and its answer, logged with ``RXHUBS_BENCH_DEBUG`` (what queued on the storage account)
requests_log = logging.getLogger("rxhubs.bench.requests")


class Record:
    """What one consumer saw."""

    def __init__(self, owner_id: str | None = None) -> None:
        #: This consumer's owner id (rxhubs; None for the SDK, whose ids are its own)
        self.owner_id = owner_id
        self.processed: list[tuple[str, int, float]] = []
        self.claims: dict[str, list[float]] = defaultdict(list)
        self.closes: dict[str, list[float]] = defaultdict(list)
        self.store_calls = 0
        self.per_second: dict[str, int] = {}  # requests by wall-clock second (str: a JSON key)
        self.requests: dict[str, int] = defaultdict(int)
        #: Seconds from each request to its answer, by method and kind of blob (the storage account's round trip)
        self.request_seconds: dict[str, list[float]] = defaultdict(list)
        self._sent: dict[int, tuple[str, float]] = {}
        self.connections = 0
        self.won: dict[str, float] = {}
        self.released: dict[str, float] = {}
        self.seen_released: dict[str, float] = {}
        self.checkpoint_reads: list[float] = []
        self.fenced: dict[str, float] = {}
        self.opened: dict[str, float] = {}
        self.delivered: dict[str, float] = {}
        self.listings = {"group": 0, "presence": 0}
        self.listed: list[tuple[str, float, float]] = []  # (group or presence, began, answered)
        #: Every write of this consumer that named a new owner for a partition (a claim won, a release, a hand to
        #: another): (partition, owner named, wall time answered); renewals are left out. A claim that failed or
        #: was cut off by its deadline counts each of its writes that would have moved a partition, at that moment
        self.moves: list[tuple[str, str, float]] = []
        self._named: dict[str, str] = {}

    def note(self, verb: str, result: Any) -> None:
        """What a store call's answer says about the handover (records are rxhubs' or the SDK's dicts)."""
        now = time.time()
        if verb == "list_checkpoints":
            self.checkpoint_reads.append(now)
            return
        if verb not in ("claim_ownership", "list_ownership"):
            return
        for item in result or ():
            get = item.get if isinstance(item, dict) else lambda k, _i=item: getattr(_i, k)
            if str(get("consumer_group")).endswith("$presence"):
                continue
            pid, owner = str(get("partition_id")), get("owner_id")
            if verb == "claim_ownership" and self._named.get(pid) != (owner or ""):
                self._named[pid] = owner or ""
                self.moves.append((pid, owner or "", now))
            if verb == "list_ownership":
                # the owner the store names now: a recipient's first renewal of a record handed to it (written by
                # the former owner, naming it) names no new owner (it counted as a move, up to two intervals late)
                self._named[pid] = owner or ""
                if not owner:
                    self.seen_released.setdefault(pid, now)
                elif owner == self.owner_id and pid not in self.won:  # handed to this consumer: no claim of its own
                    self.seen_released.setdefault(pid, now)
                    self.won[pid] = now
            elif owner and (self.owner_id is None or owner == self.owner_id):
                self.won.setdefault(pid, now)
            else:  # released, or handed to another consumer
                self.released.setdefault(pid, now)

    def unanswered(self, ownerships: list[Any]) -> None:
        """A claim that failed or was cut off: each write that would have named a new owner counts as a move now."""
        now = time.time()
        for o in ownerships:
            if not o.consumer_group.endswith("$presence") and self._named.get(o.partition_id) != (o.owner_id or ""):
                self.moves.append((o.partition_id, o.owner_id or "", now))

    def count_request(self, request: Any) -> None:
        """The storage client's ``raw_request_hook``: one HTTP request about to be sent (each retry too)."""
        self.store_calls += 1
        second = str(int(time.time()))
        self.per_second[second] = self.per_second.get(second, 0) + 1
        http = request.http_request
        url = str(http.url)
        kind = "list" if "comp=list" in url else next((k for k in ("ownership", "checkpoint") if f"/{k}/" in url),
                                                       "other")
        self.requests[f"{http.method} {kind}"] += 1
        self._sent[id(http)] = (f"{http.method} {kind}", time.perf_counter())
        requests_log.debug("request %s %s", http.method, url.split("?")[0].rsplit("/", 2)[-2:])

    def count_response(self, response: Any) -> None:
        """The storage client's ``raw_response_hook``: the answer to a request counted by :meth:`count_request`."""
        sent = self._sent.pop(id(response.http_request), None)
        if sent is not None:
            self.request_seconds[sent[0]].append(time.perf_counter() - sent[1])
            requests_log.debug("answer %s %.3f s", sent[0], time.perf_counter() - sent[1])

    def first_delivered(self, partition_id: str) -> None:
        self.delivered.setdefault(partition_id, time.time())

    async def claimed(self, context: Any, *_: Any) -> None:
        self.claims[context.partition_id].append(time.time())

    async def closed(self, context: Any, *_: Any) -> None:
        self.closes[context.partition_id].append(time.time())

    def count_connections(self) -> None:
        import psutil

        port = urlparse(os.environ["RXHUBS_BENCH_EVENTHUB"].split(";")[0].split("=", 1)[1]).port
        self.connections = sum(
            1 for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        )

    def to_json(self) -> dict[str, Any]:
        return {"processed": self.processed, "claims": self.claims, "closes": self.closes, "started": STARTED,
                "store_calls": self.store_calls, "requests": self.requests,
                "request_seconds": self.request_seconds, "connections": self.connections,
                "won": self.won, "released": self.released, "seen_released": self.seen_released,
                "checkpoint_reads": self.checkpoint_reads, "fenced": self.fenced, "opened": self.opened,
                "delivered": self.delivered, "looks": self.looks(), "listed": self.listed, "moves": self.moves,
                "per_second": self.per_second}

    def looks(self) -> int:
        """Looks for a handover between rounds.

        A look lists the group and the presence records together; a round, the presence records once the
        group's came back.
        """
        groups = [began for kind, began, _ in self.listed if kind == "group"]
        together = (began for kind, began, _ in self.listed if kind == "presence")
        return sum(1 for began in together if any(abs(began - g) < 0.005 for g in groups))


class LinkOpened(logging.Handler):
    """Notes when rxhubs' receiver attached its link (its debug record ``partition %s: link open``)."""

    def __init__(self, record: Record) -> None:
        super().__init__(logging.DEBUG)
        self._record = record

    def emit(self, log_record: logging.LogRecord) -> None:
        args = log_record.args
        if log_record.msg == "partition %s: link open" and isinstance(args, tuple) and args:
            self._record.opened.setdefault(str(args[0]), log_record.created)


class NotingStore:
    """The official processor's store, noting what its verbs answered (the requests are counted by the client)."""

    VERBS = ("list_ownership", "claim_ownership", "list_checkpoints", "update_checkpoint")

    def __init__(self, inner: Any, record: Record) -> None:
        self._inner = inner
        self._record = record

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name not in self.VERBS:
            return attribute

        async def noted(*args: Any, **kwargs: Any) -> Any:
            result = await attribute(*args, **kwargs)
            self._record.note(name, result)
            return result

        return noted


def rx_store(conn: str, container: str, record: Record, *, fenced: bool = True) -> Any:
    """The rxhubs side's store: ``BlobCheckpointStore`` as users pass it, its requests counted, its answers noted.

    A subclass, so it is fenced (``is_fenced``) exactly as the store users pass is; with ``fenced=False`` a plain
    ``CheckpointStore`` around it, which rxhubs runs without the fence.
    """
    from rxhubs.stores import BlobCheckpointStore, CheckpointStore

    class Noted(BlobCheckpointStore):
        async def list_ownership(self, *args: Any) -> Any:
            # a round lists the group and the presence group; a look between rounds lists both at once
            kind = "presence" if str(args[2]).endswith("$presence") else "group"
            record.listings[kind] += 1
            began = time.time()
            result = await super().list_ownership(*args)
            record.listed.append((kind, began, time.time()))
            record.note("list_ownership", result)
            return result

        async def claim_ownership(self, ownerships: Any) -> Any:
            ownerships = list(ownerships)
            try:
                result = await super().claim_ownership(ownerships)
            except BaseException:  # failed or cut off by its deadline: its writes may have landed all the same
                record.unanswered(ownerships)
                raise
            record.note("claim_ownership", result)
            return result

        async def list_checkpoints(self, *args: Any) -> Any:
            result = await super().list_checkpoints(*args)
            record.note("list_checkpoints", result)
            return result

        async def fence(self, ownership: Any) -> Any:
            result = await super().fence(ownership)
            record.fenced.setdefault(ownership.partition_id, time.time())
            return result

        async def fence_with_state(self, ownership: Any) -> Any:  # what rxhubs calls on a store that keeps state
            result = await super().fence_with_state(ownership)
            record.fenced.setdefault(ownership.partition_id, time.time())
            return result

    store = Noted.from_connection_string(
        conn, container, raw_request_hook=record.count_request, raw_response_hook=record.count_response
    )
    if fenced:
        return store

    class Unfenced(CheckpointStore):
        # whole seconds on a blob: the loop allows for it in expiry and when it looks for a release
        timestamp_resolution = store.timestamp_resolution

        async def list_ownership(self, *args: Any) -> Any:
            return await store.list_ownership(*args)

        async def claim_ownership(self, ownerships: Any) -> Any:
            return await store.claim_ownership(ownerships)

        async def list_checkpoints(self, *args: Any) -> Any:
            return await store.list_checkpoints(*args)

        async def update_checkpoint(self, checkpoint: Any) -> None:
            await store.update_checkpoint(checkpoint)

        async def close(self) -> None:
            await store.close()

    return Unfenced()


async def sdk(args: argparse.Namespace, record: Record, stop: asyncio.Event) -> None:
    from azure.eventhub.aio import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(
        os.environ["RXHUBS_BENCH_STORAGE"], args.container, raw_request_hook=record.count_request,
        raw_response_hook=record.count_response,
    )
    client = EventHubConsumerClient.from_connection_string(
        os.environ["RXHUBS_BENCH_EVENTHUB"],
        consumer_group="$Default",
        checkpoint_store=cast(Any, NotingStore(store, record)),
        load_balancing_interval=INTERVAL,
        partition_ownership_expiration_interval=EXPIRY,
    )

    async def on_batch(context: Any, events: list[Any]) -> None:
        if not events:
            return
        record.first_delivered(context.partition_id)
        await asyncio.sleep(WORK_S)
        now = time.time()
        record.processed.extend((context.partition_id, e.sequence_number, now) for e in events)
        await context.update_checkpoint()

    task = asyncio.create_task(client.receive_batch(
        on_batch, starting_position="-1", max_batch_size=100,
        on_partition_initialize=record.claimed, on_partition_close=record.closed,
    ))
    await stop.wait()
    record.count_connections()
    await client.close()
    task.cancel()
    await store.close()


async def rx(args: argparse.Namespace, record: Record, stop: asyncio.Event) -> None:

    import rxhubs
    from rxhubs import operators as hops
    store = rx_store(os.environ["RXHUBS_BENCH_STORAGE"], args.container, record, fenced=not args.unfenced)
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"])
    shutdown = rxhubs.Shutdown()

    async def work(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
        record.first_delivered(batch.partition_id)
        await asyncio.sleep(WORK_S)  # the same work per batch as the SDK side
        now = time.time()
        record.processed.extend((batch.partition_id, e.sequence_number, now) for e in batch)
        return batch

    transport_log = logging.getLogger("rxhubs.transport.azure")
    transport_log.setLevel(logging.DEBUG)
    transport_log.addHandler(LinkOpened(record))
    pipeline: Any = rxhubs.consume(
        hub, "$Default", store, owner_id=args.owner, load_balancing_interval=INTERVAL,
        ownership_expiration=EXPIRY, max_batch_size=100,
        on_partition_initialize=record.claimed, on_partition_close=record.closed,
    ).pipe(hops.process(work), hops.checkpoint(store, max_interval=CHECKPOINT_S))
    # ``scale --real`` follows docs/operations.md's guidance for large hubs: the collector's thresholds too
    thresholds = os.environ.get("RXHUBS_BENCH_GC_THRESHOLDS")
    gc_thresholds = cast(Any, tuple(int(x) for x in thresholds.split(","))) if thresholds else None
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=shutdown, signals=(), gc_thresholds=gc_thresholds))
    await stop.wait()
    record.count_connections()
    shutdown.request()
    await runner
    await hub.close()
    await store.close()


def _import(impl: str) -> None:
    """Import what the side's consumer imports (its first use then costs no import time)."""
    if impl == "rxhubs":
        import rxhubs.operators
        import rxhubs.stores
        import rxhubs.transport._hub

        _ = rxhubs.EventHub, rxhubs.stores.BlobCheckpointStore  # imported when first used (0.4 s for the blob SDK)
    else:
        import azure.eventhub.aio
        import azure.eventhub.extensions.checkpointstoreblobaio  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["sdk", "rxhubs"], required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--unfenced", action="store_true", help="rxhubs: the store without its fence (comparison)")
    parser.add_argument("--start-line", action="store_true",
                        help="after 'ready', wait for a line on stdin before consuming (consumers that join at once)")
    args = parser.parse_args()
    _import(args.impl)  # before "ready": a process's start-up is not the balancing a scenario times
    record = Record(args.owner if args.impl == "rxhubs" else None)
    diagnostics()  # RXHUBS_BENCH_BALANCING_LOG, RXHUBS_BENCH_GC_LOG, RXHUBS_BENCH_DEBUG

    async def go() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        if args.start_line:
            await asyncio.to_thread(sys.stdin.readline)
        await (sdk(args, record, stop) if args.impl == "sdk" else rx(args, record, stop))

    asyncio.run(go())
    with open(args.out, "w") as out:
        json.dump(record.to_json(), out)


if __name__ == "__main__":
    main()
