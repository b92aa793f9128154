"""rxhubs.spark.write on asyncio with real threads, without Spark: where the job runs, and the next
micro-batch converted while the current one is written."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from typing import Any

from reactivex import operators as ops

import rxhubs
import rxhubs.spark
from rxhubs import EventBatch
from rxhubs._shutdown import Shutdown
from rxhubs.testing import InMemoryEventHub


def one_partition(events: int) -> InMemoryEventHub:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([f"{i}" for i in range(events)], partition_id="0")
    return hub


async def run_until(pipeline: Any, events: int) -> list[EventBatch]:
    stop = Shutdown()
    out: list[EventBatch] = []

    def tap(batch: EventBatch) -> None:
        out.append(batch)
        if sum(len(b) for b in out) >= events:
            stop.request()

    await rxhubs.arun(pipeline.pipe(ops.do_action(tap)), shutdown=stop, signals=())
    return out


def first_numbers(batches: Sequence[EventBatch]) -> list[int]:
    return [int(b.events[0].body) for b in batches]


async def test_the_next_micro_batch_is_converted_while_the_current_one_is_written() -> None:
    hub = one_partition(60)
    converted: list[tuple[str, list[int]]] = []
    second_converted = threading.Event()
    written: list[list[int]] = []

    def convert(batches: Sequence[EventBatch]) -> list[int]:
        converted.append((threading.current_thread().name, first_numbers(batches)))
        if len(converted) == 2:
            second_converted.set()
        return first_numbers(batches)

    def writer(data: list[int]) -> None:
        if not written:  # the first write returns only once the second micro-batch was converted
            assert second_converted.wait(30), "the next micro-batch was not converted during the write"
        written.append(data)

    source = rxhubs.partition_batches(hub, "0", max_batch_size=10, max_inflight=6)
    emitted = await run_until(source.pipe(rxhubs.spark.write(writer, convert=convert, max_events=20)), 60)

    assert written == [[0, 10], [20, 30], [40, 50]]  # still written one at a time, in order
    assert converted[1] == ("rxhubs-spark-convert_0", [20, 30])
    assert [e.sequence_number for b in emitted for e in b] == list(range(60))


async def test_jobs_run_on_one_dedicated_thread_and_results_come_back_on_the_loop() -> None:
    hub = one_partition(30)
    loop_thread = threading.current_thread()
    threads: list[str] = []
    emitted_on: list[threading.Thread] = []
    source = rxhubs.partition_batches(hub, "0", max_batch_size=10)
    sink = rxhubs.spark.write(lambda data: threads.append(threading.current_thread().name), convert=list, max_events=10)
    await run_until(source.pipe(sink, ops.do_action(lambda _: emitted_on.append(threading.current_thread()))), 30)
    assert len(threads) == 3 and set(threads) == {"rxhubs-spark-write_0"}
    assert set(emitted_on) == {loop_thread}


async def test_a_given_executor_runs_the_jobs() -> None:
    hub = one_partition(20)
    threads: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="mine") as pool:
        sink = rxhubs.spark.write(
            lambda data: threads.append(threading.current_thread().name), convert=list, max_events=10, executor=pool
        )
        await run_until(rxhubs.partition_batches(hub, "0", max_batch_size=10).pipe(sink), 20)
    assert threads and all(name.startswith("mine") for name in threads)


async def test_a_prepared_conversion_that_failed_is_done_again_on_retry() -> None:
    hub = one_partition(40)
    calls: list[tuple[str, list[int]]] = []
    second_tried = threading.Event()

    def convert(batches: Sequence[EventBatch]) -> list[int]:
        numbers = first_numbers(batches)
        calls.append((threading.current_thread().name, numbers))
        if numbers == [20, 30] and not second_tried.is_set():
            second_tried.set()
            raise ValueError("conversion failed once")
        return numbers

    written: list[list[int]] = []

    def writer(data: list[int]) -> None:
        if not written:  # the first write returns once the second micro-batch's conversion ran (and failed)
            assert second_tried.wait(30)
        written.append(data)

    source = rxhubs.partition_batches(hub, "0", max_batch_size=10, max_inflight=6)
    sink = rxhubs.spark.write(writer, convert=convert, max_events=20, backoff=0.01)
    await run_until(source.pipe(sink), 40)
    assert written == [[0, 10], [20, 30]]
    assert calls[1:] == [("rxhubs-spark-convert_0", [20, 30]), ("rxhubs-spark-write_0", [20, 30])]
