"""One consumer process of the exactly-once kill test: ``python -m tests.faults.eo_worker OWNER DIR SINKS``.

Reads the hub of ``RXHUBS_TEST_EVENTHUB`` with ``rxhubs.consume``, ownership and checkpoints in the SQLite store
``DIR/store.sqlite`` shared by every consumer, owner id ``OWNER`` (one per incarnation), and writes through each
sink named in ``SINKS`` (comma separated), each in its own consumer group, all in this one process so a kill hits
them all at the same moment:

* ``jsonl``: the at-least-once control, group ``control``: ``jsonl_sink`` into ``DIR/control-OWNER.jsonl`` (one
  file per incarnation: a kill -9 may tear its last line, and nobody appends after it), then ``hops.checkpoint``;
* ``sqlite`` / ``delta``: exactly once, group ``$Default``: ``consume(..., positions=sink)`` and
  ``hops.exactly_once(sink)`` into ``rxhubs.tables.SqliteSink(DIR/table.sqlite)`` /
  ``rxhubs.tables.DeltaSink(DIR/delta)``.

The fault hook lives here, not in the library: with ``RXHUBS_TEST_KILL_AT=after_write:N`` the process kills itself
with SIGKILL at its N-th write, after the data was written and before it was committed: for the control, after
the jsonl lines were flushed and before the checkpoint; for the exactly-once sinks, see :mod:`tests.faults.eo_hooks`.

``DIR/OWNER.log`` gets one flushed line per fact the test checks: ``OPEN group partition time``,
``CLOSE group partition reason``, ``COMMIT began ended partition:written:skipped ...`` (each exactly-once commit, see
:mod:`tests.faults.eo_hooks`), ``LOST group partition operation`` (an ``OwnershipLostError`` reported),
``HOOK sink`` (right before the hook's kill). It prints ``ready`` once subscribed; SIGTERM stops it gracefully
(exit code 0).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import reactivex
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.errors import OwnershipLostError
from rxhubs.operators._sinks import jsonl_sink

INTERVAL = 0.5  # load balancing
EXPIRY = 3.0  # ownership expiry
COMMIT_INTERVAL = 0.5  # checkpoints (control) and table commits (exactly once)
#: Seconds a table commit may take: longer than the longest pause of the zombie (``eo_kit.chaos``: its expiry,
#: four intervals, then up to 60 s for the others to commit what it held). A commit the pause froze then ends after
#: the resume, as the test expects of a zombie, instead of timing out at once on a clock that ran while the process
#: was stopped (under CI load the wait reached 60 s, and the zombie's commit never ran: nothing to check).
COMMIT_TIMEOUT = 180.0
CONTROL_GROUP = "control"
EO_GROUP = "$Default"


class Log:
    """The incarnation's fact log (line buffered, flushed per line: a kill -9 loses none of it)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()


class KillHook:
    """``RXHUBS_TEST_KILL_AT=after_write:N``: this process dies with SIGKILL at its N-th write (``due``)."""

    def __init__(self, note: Log) -> None:
        spec = os.environ.get("RXHUBS_TEST_KILL_AT", "")
        self.at = int(spec.split(":")[1]) if spec.startswith("after_write:") else None
        self.writes = 0
        self.note = note

    def due(self) -> bool:
        """Count one write; whether it is the one to die in."""
        if self.at is None:
            return False
        self.writes += 1
        return self.writes == self.at

    def kill(self, where: str) -> None:
        """Note ``HOOK where``, then SIGKILL this process (from any thread)."""
        self.note(f"HOOK {where}")
        os.kill(os.getpid(), signal.SIGKILL)


def _options(group: str, owner: str, note: Log) -> dict[str, Any]:
    def on_error(context: rxhubs.ErrorContext, error: Exception) -> None:
        if isinstance(error, OwnershipLostError):
            note(f"LOST {group} {context.partition_id} {context.operation}")

    return {
        "on_partition_initialize": lambda context: note(f"OPEN {group} {context.partition_id} {time.time():.3f}"),
        "on_partition_close": lambda context, reason: note(f"CLOSE {group} {context.partition_id} {reason.value}"),
        "on_partition_error": on_error,
        "owner_id": owner,
        "load_balancing_interval": INTERVAL,
        "ownership_expiration": EXPIRY,
        "max_wait": 0.2,
        "max_batch_size": 20,
    }


def control(hub: Any, store: Any, owner: str, folder: Path, note: Log, hook: KillHook | None) -> Any:
    """The at-least-once control: jsonl lines written, then the checkpoint (the hook kills in between)."""

    def written(batch: rxhubs.EventBatch) -> None:
        if batch.events and hook is not None and hook.due():
            hook.kill("jsonl")

    return rxhubs.consume(hub, CONTROL_GROUP, store, **_options(CONTROL_GROUP, owner, note)).pipe(
        jsonl_sink(folder / f"control-{owner}.jsonl", fsync=False),  # a kill -9 keeps what the OS was given
        ops.do_action(written),
        hops.checkpoint(store, max_interval=COMMIT_INTERVAL),
    )


def exactly_once(kind: str, hub: Any, store: Any, owner: str, folder: Path, note: Log, hook: KillHook | None
                 ) -> Any:
    """The exactly-once pipeline into the ``kind`` table, positions resumed from the table."""
    from tests.faults.eo_hooks import make_sink

    sink = make_sink(kind, folder, note, hook)
    return rxhubs.consume(hub, EO_GROUP, store, positions=sink, **_options(EO_GROUP, owner, note)).pipe(
        hops.exactly_once(sink, max_interval=COMMIT_INTERVAL, timeout=COMMIT_TIMEOUT),
    )


async def amain(owner: str, folder: Path, sinks: list[str], note: Log) -> None:
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_EVENTHUB"])
    store = rxhubs.stores.SqliteCheckpointStore(str(folder / "store.sqlite"))
    hook = KillHook(note)
    eo = [s for s in sinks if s != "jsonl"]
    pipelines = []
    if "jsonl" in sinks:  # the hook kills on the control's writes only when no exactly-once sink is there
        pipelines.append(control(hub, store, owner, folder, note, None if eo else hook))
    pipelines.extend(exactly_once(kind, hub, store, owner, folder, note, hook) for kind in eo)
    print("ready", flush=True)
    try:
        await rxhubs.arun(reactivex.merge(*pipelines), grace=10.0)
    finally:
        await hub.close()
        await store.close()
        await _report_leftovers()


async def _report_leftovers() -> None:
    """Print the stacks of tasks still pending 0.5 s after the pipeline stopped (asyncio.run would cancel them)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:
        _, pending = await asyncio.wait(others, timeout=0.5)
        for task in pending:
            print(f"LEFTOVER task {task!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)


def main() -> None:
    owner, folder, sinks = sys.argv[1], Path(sys.argv[2]), sys.argv[3].split(",")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {owner} %(levelname)s %(name)s: %(message)s")
    faulthandler.register(signal.SIGUSR1)  # the test asks for the stacks of a process that does not stop
    with open(folder / f"{owner}.log", "a", buffering=1) as out:
        asyncio.run(amain(owner, folder, sinks, Log(out)))


if __name__ == "__main__":
    main()
