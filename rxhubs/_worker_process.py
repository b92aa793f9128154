"""Inside one worker process of :func:`~rxhubs.run_workers`: call the user's factory, run its pipeline, count events.

The parent (:mod:`rxhubs._workers`) starts each worker with :func:`worker_main` as its target; everything here runs
in the child: its signals (Ctrl-C is the parent's; SIGTERM stops the pipeline gracefully), the wait for the
workers started with it, the pipeline under :func:`rxhubs.arun`, the events counted into the parent's shared
counter, and the resources the factory asked to have closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from reactivex import Observable
from reactivex import operators as ops

from rxhubs._batch import EventBatch
from rxhubs._run import arun
from rxhubs._shutdown import release_signals
from rxhubs._siblings import barrier_gate, set_start_gate
from rxhubs.errors import ConfigurationError, RxHubsError

if TYPE_CHECKING:
    from rxhubs._workers import WorkerContext

__all__ = ["Running", "worker_main"]

_log = logging.getLogger("rxhubs.workers")

_SIBLINGS_WAIT = 3.0  # how long workers started together wait for each other before their first round (then: alone)


def _count(item: Any) -> int:
    return len(item.events) if isinstance(item, EventBatch) else 1


async def _close(resource: Any) -> None:
    try:
        result = resource.close()
        if asyncio.iscoroutine(result):
            await result
    except Exception as exc:  # closing is best effort; the pipeline's outcome is what counts
        _log.warning("closing %s failed: %s", type(resource).__name__, exc)


class Running(NamedTuple):
    """How each worker runs its pipeline (``arun``'s arguments)."""

    grace: float
    gc_thresholds: tuple[int, int, int] | None = None


async def _work(factory: Callable[[WorkerContext], Observable[Any]], context: WorkerContext, counter: Any,
                running: Running) -> None:
    def seen(item: Any) -> None:
        counter.value += _count(item)

    try:
        pipeline = factory(context)
        if not isinstance(pipeline, Observable):
            raise ConfigurationError(
                f"the pipeline factory returned {type(pipeline).__name__}, not an Observable"
            )
        # the worker started with SIGTERM held (_Slot.start): one sent before arun's handler is in place (a stop
        # while the worker imports and connects) waits for it, then stops the pipeline gracefully (exit 0)
        asyncio.get_running_loop().call_soon(release_signals, signal.SIGTERM)  # runs once arun installed it
        await arun(pipeline.pipe(ops.do_action(seen)), grace=running.grace, signals=(signal.SIGTERM,),
                   gc_thresholds=running.gc_thresholds)
    finally:
        for resource in reversed(context._resources):
            await _close(resource)


def worker_main(factory: Callable[[WorkerContext], Observable[Any]], context: WorkerContext, counter: Any,
                 running: Running, siblings: Any = None) -> None:
    """A worker process: Ctrl-C is the parent's to handle (it sends SIGTERM); exit 0, 1 on error, 2 on ours.

    ``siblings``: the barrier of the workers started together (first starts only): the worker's balancing
    loop writes its presence record and waits there before its first round (``rxhubs.balancing._start_gate``).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if siblings is not None:
        set_start_gate(barrier_gate(siblings, _SIBLINGS_WAIT))
    try:
        asyncio.run(_work(factory, context, counter, running))
    except RxHubsError as exc:
        print(f"rxhubs worker {context.owner_id}: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    except Exception as exc:
        print(f"rxhubs worker {context.owner_id}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
