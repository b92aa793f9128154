"""The async kernel: one coroutine, run as an asyncio task or stepped on a virtual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from reactivex.scheduler.eventloop import AsyncIOScheduler
from reactivex.testing import TestScheduler

from rxhubs._rx import Signal, deadline, from_coroutine, never, now, sleep
from rxhubs.errors import ConfigurationError


async def sleepy(seconds: float, value: str) -> tuple[str, float]:
    start = now()
    await sleep(seconds)
    return value, now() - start


def record(observable: Any, scheduler: Any) -> list[tuple[float, str, Any]]:
    seen: list[tuple[float, str, Any]] = []
    observable.subscribe(
        lambda v: seen.append((scheduler.clock, "next", v)),
        lambda e: seen.append((scheduler.clock, "error", e)),
        lambda: seen.append((scheduler.clock, "done", None)),
        scheduler=scheduler,
    )
    return seen


def test_virtual_sleep_counts_in_scheduler_time() -> None:
    scheduler = TestScheduler()
    seen = record(from_coroutine(lambda: sleepy(5.0, "a")), scheduler)
    scheduler.advance_to(4.9)
    assert seen == []
    scheduler.advance_to(5.0)
    assert seen == [(5.0, "next", ("a", 5.0)), (5.0, "done", None)]


def test_a_coroutine_that_never_suspends_emits_at_subscription() -> None:
    async def at_once() -> int:
        return 7

    scheduler = TestScheduler()
    assert record(from_coroutine(at_once), scheduler) == [(0.0, "next", 7), (0.0, "done", None)]


def test_signal_wakes_a_virtual_waiter_or_times_out() -> None:
    scheduler = TestScheduler()
    signal = Signal()
    woken = record(from_coroutine(lambda: signal.wait(timeout=10.0)), scheduler)
    timed_out = record(from_coroutine(lambda: Signal().wait(timeout=3.0)), scheduler)
    scheduler.schedule_absolute(2.0, lambda *_: signal.set())
    scheduler.advance_to(20.0)
    assert woken[0] == (2.0, "next", True)
    assert timed_out[0] == (3.0, "next", False)


def test_deadline_raises_timeout_in_virtual_time() -> None:
    async def hung() -> str:
        try:
            async with deadline(4.0):
                await never()
        except TimeoutError:
            return f"timed out at {now():.0f}"
        return "not reached"

    scheduler = TestScheduler()
    seen = record(from_coroutine(hung), scheduler)
    scheduler.advance_to(10.0)
    assert seen[0][1:] == ("next", "timed out at 4")


def test_disposal_cancels_and_lets_finally_await() -> None:
    cleaned: list[float] = []

    async def worker() -> None:
        try:
            await never()
        finally:
            await sleep(1.0)
            cleaned.append(now())

    scheduler = TestScheduler()
    subscription = from_coroutine(worker).subscribe(scheduler=scheduler)
    scheduler.advance_to(2.0)
    subscription.dispose()
    scheduler.advance_to(5.0)
    assert cleaned == [3.0]


def test_real_io_on_a_virtual_clock_is_a_configuration_error() -> None:
    async def real() -> None:
        await asyncio.sleep(0.01)

    scheduler = TestScheduler()
    seen = record(from_coroutine(real), scheduler)
    assert seen[0][1] == "error"
    assert isinstance(seen[0][2], ConfigurationError)
    assert "virtual-time" in str(seen[0][2])


def test_errors_go_to_on_error() -> None:
    async def boom() -> None:
        await sleep(1.0)
        raise ValueError("bad")

    scheduler = TestScheduler()
    seen = record(from_coroutine(boom), scheduler)
    scheduler.advance_to(1.0)
    assert seen[0][1] == "error" and isinstance(seen[0][2], ValueError)


async def test_same_coroutines_run_on_asyncio() -> None:
    loop = asyncio.get_running_loop()
    scheduler = AsyncIOScheduler(loop)
    done: asyncio.Future[Any] = loop.create_future()
    signal = Signal()
    loop.call_later(0.01, signal.set)

    async def both() -> tuple[bool, bool, tuple[str, float]]:
        return await signal.wait(timeout=5.0), await Signal().wait(timeout=0.01), await sleepy(0.01, "x")

    from_coroutine(both).subscribe(done.set_result, done.set_exception, scheduler=scheduler)
    woken, timed_out, (value, _) = await done
    assert (woken, timed_out, value) == (True, False, "x")


async def test_asyncio_disposal_cancels_the_task() -> None:
    cancelled = asyncio.Event()

    async def worker() -> None:
        try:
            await never()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    subscription = from_coroutine(worker).subscribe(scheduler=AsyncIOScheduler(asyncio.get_running_loop()))
    await asyncio.sleep(0)
    subscription.dispose()
    await asyncio.wait_for(cancelled.wait(), 5.0)


async def test_signal_set_from_another_thread() -> None:
    signal = Signal()
    loop = asyncio.get_running_loop()
    loop.run_in_executor(None, signal.set)
    assert await signal.wait(timeout=5.0) is True


def test_run_without_a_loop_steps_on_the_current_thread() -> None:
    assert from_coroutine(lambda: sleepy(0.0, "z")).run()[0] == "z"


@pytest.mark.parametrize("seconds", [0.0, 0.5])
def test_virtual_deadline_not_reached(seconds: float) -> None:
    async def quick() -> str:
        async with deadline(1.0):
            await sleep(seconds)
        return "ok"

    scheduler = TestScheduler()
    seen = record(from_coroutine(quick), scheduler)
    scheduler.advance_to(5.0)
    assert seen[0][1:] == ("next", "ok")



async def test_run_inside_a_running_loop_steps_a_coroutine_that_never_suspends() -> None:
    async def at_once() -> int:
        return 3

    assert from_coroutine(at_once).run() == 3  # NewThreadScheduler: stepped, no deadlock with this loop
