"""run/arun: drive a pipeline to completion; a stop signal ends it gracefully."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap

import pytest
import reactivex
from reactivex import operators as ops

import rxhubs
from rxhubs._shutdown import Shutdown
from rxhubs.errors import ConfigurationError
from rxhubs.testing import InMemoryEventHub


def test_run_counts_items_and_returns_on_completion() -> None:
    assert rxhubs.run(reactivex.of(1, 2, 3)) == 3


def test_run_raises_the_pipeline_error() -> None:
    with pytest.raises(ConfigurationError, match="bad"):
        rxhubs.run(reactivex.throw(ConfigurationError("bad")))


async def test_arun_graceful_stop_completes_after_the_batch_in_flight() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(["a"] * 10, partition_id="0")
    stop = Shutdown()
    closed: list[object] = []
    held: list[rxhubs.Ack] = []
    completed: list[bool] = []

    def hold_one(batch: rxhubs.EventBatch) -> None:
        held.append(batch.hold())
        stop.request()  # stop while this batch is still held
        asyncio.get_running_loop().call_later(0.05, held[-1])  # finished a little later

    source = rxhubs.partition_batches(hub, "0", max_batch_size=4, max_inflight=1, on_closed=closed.append)
    pipeline = source.pipe(ops.do_action(hold_one, on_completed=lambda: completed.append(True)))
    count = await rxhubs.arun(pipeline, shutdown=stop, signals=())
    assert count == 1  # no pull after the stop request
    assert completed == [True]  # completed, not cut off
    await asyncio.sleep(0)
    assert len(closed) == 1


async def test_arun_cuts_off_a_pipeline_that_does_not_stop_within_grace() -> None:
    stop = Shutdown()
    asyncio.get_running_loop().call_later(0.05, stop.request)
    count = await rxhubs.arun(reactivex.never(), shutdown=stop, grace=0.1, signals=())
    assert count == 0


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, rxhubs
    from reactivex import operators as ops
    from rxhubs.testing import InMemoryEventHub

    hub = InMemoryEventHub(partition_count=2)
    closed = []
    sources = [rxhubs.partition_batches(hub, p, max_wait=0.2, on_closed=closed.append) for p in ("0", "1")]
    import reactivex
    pipeline = reactivex.merge(*sources).pipe(
        ops.do_action(on_completed=lambda: print("completed", flush=True))
    )
    async def main():
        asyncio.get_running_loop().call_later(0.3, lambda: print("ready", flush=True))
        await rxhubs.arun(pipeline)
        await asyncio.sleep(0.05)
        print("closed", len(closed), flush=True)
    asyncio.run(main())
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_real_process_gracefully(sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.split("\n")[:2] == ["completed", "closed 2"]
    assert "Traceback" not in err


def test_gc_thresholds_hold_while_the_pipeline_runs_and_are_put_back_after() -> None:
    import gc

    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    pipeline = reactivex.of(1, 2).pipe(ops.do_action(lambda _: seen.append(gc.get_threshold())))
    assert rxhubs.run(pipeline, gc_thresholds=(50_000, 20, 100)) == 2
    assert seen == [(50_000, 20, 100)] * 2
    assert gc.get_threshold() == before
    with pytest.raises(ConfigurationError, match="gc_thresholds"):
        rxhubs.run(reactivex.throw(ValueError("never reached")), gc_thresholds=(700, 10))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failed"):  # put back when the pipeline fails, too
        rxhubs.run(reactivex.throw(ValueError("failed")), gc_thresholds=(1, 1, 1))
    assert gc.get_threshold() == before
