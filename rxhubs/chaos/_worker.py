"""One consumer process of the ``chaos`` scenario: ``rxhubs.consume`` + ``hops.checkpoint``, keeping a ledger.

``python -m rxhubs.chaos._worker --name c1 --incarnation 2 --ledger PATH --container C`` with
``RXHUBS_CHAOS_EVENTHUB`` (the hub), ``RXHUBS_CHAOS_ENDPOINT`` (this consumer's fault proxy toward it) and
``RXHUBS_CHAOS_STORAGE`` (Azurite, through its store proxy). Its owner id is ``NAME.INCARNATION``, so a
restarted process is a new owner that takes over through the store like any other. The ledger is JSON lines,
appended and flushed after every batch and before every checkpoint write (a kill -9 loses none of what was
processed before a checkpoint):

* ``{"k": "start", "c", "i", "pid", "t"}`` once;
* ``{"k": "ev", "p", "s", "id", "c", "i", "t"}`` per processed event (``id`` and the intended partition come
  from the body);
* ``{"k": "own", "op": "open"|"close", "p", "reason", "c", "i", "t"}`` per partition gained or lost;
* ``{"k": "cp", "p", "s", "c", "i", "t0", "t", "ok", "err"}`` per checkpoint attempt and its result;
* ``{"k": "skew", "offset", "c", "i", "t"}`` when the orchestrator shifts this consumer's clock.

Clock skew: rxhubs' balancing takes its time from the scheduler it runs on (``consume(scheduler=...)``) and
compares it with the store's ``last_modified_time`` (Azurite's clock); this process passes an asyncio
scheduler whose ``now`` is shifted by an offset the orchestrator sets with a ``skew SECONDS`` line on stdin.
Times in the ledger are the true wall clock. SIGTERM stops gracefully (checkpoints flush, ownership released).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs.chaos._plan import CHECKPOINT_INTERVAL, EXPIRY, INTERVAL
from rxhubs.stores import CheckpointStore


class SkewedScheduler(AsyncIOScheduler):
    """An asyncio scheduler whose clock runs ``offset`` seconds ahead (negative: behind) of the wall clock.

    Example:
        >>> import asyncio
        >>> s = SkewedScheduler(asyncio.new_event_loop())
        >>> s.offset = 4.0
        >>> round((s.now - dt.datetime.now(dt.timezone.utc)).total_seconds())
        4
    """

    offset = 0.0

    @property
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.offset)


class Ledger:
    """The append-only JSON-lines ledger of one incarnation."""

    def __init__(self, path: str, name: str, incarnation: int) -> None:
        self._out = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - closed by close()
        self.c, self.i = name, incarnation

    def write(self, kind: str, **fields: Any) -> None:
        fields.setdefault("t", round(time.time(), 4))
        self._out.write(json.dumps({"k": kind, **fields, "c": self.c, "i": self.i}, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()


class LedgerStore(CheckpointStore):
    """The real checkpoint store; each checkpoint attempt is flushed to the ledger first, its result after."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self._inner = inner
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:  # anything else the store offers, unchanged
        return getattr(self._inner, name)

    async def list_ownership(self, *args: Any, **kwargs: Any) -> Any:
        return await self._inner.list_ownership(*args, **kwargs)

    async def claim_ownership(self, *args: Any, **kwargs: Any) -> Any:
        return await self._inner.claim_ownership(*args, **kwargs)

    async def list_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        return await self._inner.list_checkpoints(*args, **kwargs)

    async def update_checkpoint(self, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._ledgered(self._inner.update_checkpoint, checkpoint, *args, **kwargs)

    async def update_checkpoint_fenced(self, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        """The fenced write (rxhubs uses it when the store also has ``fence``), ledgered the same way."""
        return await self._ledgered(self._inner.update_checkpoint_fenced, checkpoint, *args, **kwargs)

    async def _ledgered(self, write: Any, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        self._ledger.flush()
        began = round(time.time(), 4)
        try:
            result = await write(checkpoint, *args, **kwargs)
        except BaseException as exc:
            self._ledger.write("cp", p=checkpoint.partition_id, s=checkpoint.sequence_number, t0=began, ok=False,
                               err=f"{type(exc).__name__}: {exc}"[:300])
            self._ledger.flush()
            raise
        self._ledger.write("cp", p=checkpoint.partition_id, s=checkpoint.sequence_number, t0=began, ok=True)
        self._ledger.flush()
        return result

    async def close(self) -> None:
        await self._inner.close()


def _listen_for_skew(loop: asyncio.AbstractEventLoop, scheduler: SkewedScheduler, ledger: Ledger) -> None:
    """Read ``skew SECONDS`` lines from stdin (a daemon thread) and shift the scheduler's clock."""

    def apply(offset: float) -> None:
        scheduler.offset = offset
        ledger.write("skew", offset=offset)
        ledger.flush()

    for line in sys.stdin:
        parts = line.split()
        if len(parts) == 2 and parts[0] == "skew":
            loop.call_soon_threadsafe(apply, float(parts[1]))
    # stdin ended: the orchestrator is gone (a killed bench, a test's time-out) without stopping us. Stop as on
    # its SIGTERM, or the consumer would run on for ever, orphaned (18 were found after 6 killed runs).
    os.kill(os.getpid(), signal.SIGTERM)


async def consume(args: argparse.Namespace, ledger: Ledger) -> None:
    import rxhubs
    from rxhubs import operators as hops
    from rxhubs.stores import BlobCheckpointStore

    loop = asyncio.get_running_loop()
    scheduler = SkewedScheduler(loop)
    threading.Thread(target=_listen_for_skew, args=(loop, scheduler, ledger), daemon=True).start()
    inner = BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_CHAOS_STORAGE"], args.container)
    store = LedgerStore(inner, ledger)
    # through the proxy, but with the emulator's own address as the namespace: ownership records are keyed by
    # namespace, and a namespace per proxy port would split the consumer group in three
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_CHAOS_EVENTHUB"],
                                                 custom_endpoint_address=os.environ["RXHUBS_CHAOS_ENDPOINT"])

    def work(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
        for event in batch:
            try:
                body = json.loads(event.body)
                eid, intended = body.get("id"), body.get("p")
            except (ValueError, AttributeError):
                eid, intended = None, None
            ledger.write("ev", p=batch.partition_id, s=event.sequence_number, id=eid, ip=intended)
        ledger.flush()
        return batch

    async def opened(context: Any, *_: Any) -> None:
        ledger.write("own", op="open", p=context.partition_id, reason=None)
        ledger.flush()

    async def closed(context: Any, reason: Any, *_: Any) -> None:
        ledger.write("own", op="close", p=context.partition_id, reason=getattr(reason, "value", str(reason)))
        ledger.flush()

    pipeline: Any = rxhubs.consume(
        hub, "$Default", store, owner_id=f"{args.name}.{args.incarnation}", load_balancing_interval=INTERVAL,
        ownership_expiration=EXPIRY, max_batch_size=50, max_wait=0.2, scheduler=scheduler,
        on_partition_initialize=opened, on_partition_close=closed,
    ).pipe(hops.process(work), hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL))
    print("ready", flush=True)
    try:
        await rxhubs.arun(pipeline, grace=20.0)
    finally:
        await hub.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--incarnation", type=int, required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--container", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {args.name}.{args.incarnation} %(levelname)s %(name)s: %(message)s")
    ledger = Ledger(args.ledger, args.name, args.incarnation)
    ledger.write("start", pid=os.getpid())
    ledger.flush()
    try:
        asyncio.run(consume(args, ledger))
    finally:
        ledger.write("stop")
        ledger.close()


if __name__ == "__main__":
    main()
