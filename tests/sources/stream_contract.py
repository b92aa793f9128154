"""What ``partition_batches`` keeps over any transport, as a mixin of tests run on asyncio.

``test_stream_contract_memory.py`` runs it over the in-memory hub, ``test_stream_contract_azure.py`` over
``rxhubs.EventHub`` (the unmodified azure-eventhub client) and the emulator: one code path, two transports.
Each module provides an ``env`` fixture (a :class:`~tests.transport.receiver_contract.HubEnv`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from reactivex.scheduler.eventloop import AsyncIOScheduler

import rxhubs
from rxhubs import EventBatch, Position
from rxhubs._shutdown import shutdown_scope
from rxhubs.errors import OwnershipLostError
from tests.transport.receiver_contract import HubEnv


class Collector:
    """Subscribes a partition stream on the running loop and records what it emits."""

    def __init__(self, env: HubEnv, partition_id: str, *, hold: bool = False, **options: Any) -> None:
        self.closed = asyncio.Event()
        source = rxhubs.partition_batches(env.hub, partition_id, on_closed=lambda _: self.closed.set(), **options)
        self.batches: list[EventBatch] = []
        self.acks: list[rxhubs.Ack] = []
        self.error: Exception | None = None
        self.completed = asyncio.Event()
        self.hold = hold
        self.subscription = source.subscribe(
            self._on_next, self._on_error, self.completed.set, scheduler=AsyncIOScheduler(asyncio.get_running_loop())
        )

    def _on_next(self, batch: EventBatch) -> None:
        self.batches.append(batch)
        if self.hold:
            self.acks.append(batch.hold())

    def _on_error(self, error: Exception) -> None:
        self.error = error
        self.completed.set()

    @property
    def sequence_numbers(self) -> list[int]:
        return [e.sequence_number for b in self.batches for e in b]

    async def stop(self) -> None:
        """Dispose, and wait until the receiver is closed (so no link outlives the test)."""
        self.subscription.dispose()
        async with asyncio.timeout(20.0):
            await self.closed.wait()

    async def until(self, condition: Any, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():  # noqa: ASYNC110 - polls what the subscription records
                await asyncio.sleep(0.02)


class PartitionStreamContract:
    async def test_every_event_in_order_in_bounded_batches(self, env: HubEnv) -> None:
        await env.send([f"e{i}".encode() for i in range(30)], "0")
        got = Collector(env, "0", max_batch_size=4, max_wait=0.2)
        await got.until(lambda: len(got.sequence_numbers) >= 30)
        await got.stop()
        assert got.sequence_numbers == list(range(30))
        assert max(len(b) for b in got.batches) <= 4
        assert {b.partition_id for b in got.batches} == {"0"}
        origins = [b._origin.index for b in got.batches if b._origin is not None]
        assert origins == list(range(len(got.batches)))  # each batch's place in the read, without gaps

    async def test_backpressure_holds_the_source_at_max_inflight(self, env: HubEnv) -> None:
        await env.send([b"x"] * 20, "1")
        got = Collector(env, "1", max_batch_size=2, max_inflight=3, hold=True)
        await got.until(lambda: len(got.batches) >= 3)
        await asyncio.sleep(0.5)
        assert len(got.batches) == 3  # three held: nothing more is pulled
        for ack in list(got.acks):
            ack()
        await got.until(lambda: len(got.batches) >= 6)
        await got.stop()
        assert got.sequence_numbers[:12] == list(range(12))

    async def test_starts_where_it_is_told(self, env: HubEnv) -> None:
        await env.send([f"e{i}".encode() for i in range(10)], "0")
        got = Collector(env, "0", start=Position.from_sequence_number(6))
        await got.until(lambda: len(got.sequence_numbers) >= 3)
        await got.stop()
        assert got.sequence_numbers == [7, 8, 9]

    async def test_empty_batches_are_heartbeats_when_asked_for(self, env: HubEnv) -> None:
        got = Collector(env, "1", max_wait=0.1, emit_empty=True)
        await got.until(lambda: len(got.batches) >= 2)
        await env.send([b"late"], "1")
        await got.until(lambda: got.sequence_numbers == [0])
        await got.stop()
        assert [len(b) for b in got.batches[:2]] == [0, 0]

    async def test_a_reader_with_a_higher_owner_level_ends_the_stream_with_ownership_lost(self, env: HubEnv) -> None:
        await env.send([b"a"], "0")
        got = Collector(env, "0", owner_level=1, max_wait=0.1)
        await got.until(lambda: got.sequence_numbers == [0])
        async with env.hub.receiver("0", env.consumer_group, owner_level=2) as thief:
            await thief.receive_batch(1, max_wait=1.0)
            await got.until(lambda: got.completed.is_set())
            await asyncio.wait_for(got.closed.wait(), 20.0)
        assert isinstance(got.error, OwnershipLostError)

    async def test_a_graceful_stop_completes_after_the_batches_in_flight(self, env: HubEnv) -> None:
        await env.send([b"a", b"b"], "1")
        with shutdown_scope() as stop:
            got = Collector(env, "1", max_batch_size=1, max_inflight=1, hold=True)
        await got.until(lambda: len(got.batches) == 1)
        stop.request()
        await asyncio.sleep(0.3)
        assert not got.completed.is_set()  # one batch still held
        got.acks[0]()
        await got.until(lambda: got.completed.is_set())
        await asyncio.wait_for(got.closed.wait(), 20.0)
        assert got.error is None and got.sequence_numbers == [0]

    async def test_disposal_closes_the_receiver(self, env: HubEnv) -> None:
        await env.send([b"a"], "0")
        got = Collector(env, "0", owner_level=5)
        await got.until(lambda: got.sequence_numbers == [0])
        await got.stop()  # returns once on_closed was called
        async with env.hub.receiver("0", env.consumer_group, owner_level=1) as lower:  # the link was released
            assert [e.sequence_number for e in await lower.receive_batch(5, max_wait=5.0)] == [0]

    @pytest.mark.parametrize("bad", [{"max_batch_size": 0}, {"max_wait": -1}, {"start": "earliest"}])
    def test_bad_options_are_configuration_errors(self, env: HubEnv, bad: dict[str, Any]) -> None:
        with pytest.raises(rxhubs.errors.ConfigurationError):
            rxhubs.partition_batches(env.hub, "0", **bad)
