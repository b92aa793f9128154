"""The receiver contract every transport keeps, as a mixin of tests.

A test module subclasses :class:`ReceiverContract` and provides an ``env`` fixture yielding a
:class:`HubEnv`: a hub with at least two partitions, all empty at the start of each test, and a way to
send events to a partition.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest

from rxhubs import Event, Position
from rxhubs.errors import ConfigurationError, NotFoundError, OwnershipLostError, ReceiverClosedError
from rxhubs.transport import Hub, PartitionReceiver


@dataclass
class HubEnv:
    hub: Hub
    send: Callable[[Sequence[bytes], str], Awaitable[None]]
    consumer_group: str = "$Default"


async def drain(receiver: PartitionReceiver, expected: int, max_count: int = 100, pulls: int = 50) -> list[Event]:
    """Pull until ``expected`` events arrived (or ``pulls`` pulls were made)."""
    got: list[Event] = []
    for _ in range(pulls):
        if len(got) >= expected:
            break
        got.extend(await receiver.receive_batch(max_count, max_wait=0.5))
    return got


def bodies(events: Sequence[Event]) -> list[bytes]:
    return [e.body for e in events]


class ReceiverContract:
    async def test_reads_everything_in_order_from_earliest(self, env: HubEnv) -> None:
        sent = [f"e{i}".encode() for i in range(25)]
        await env.send(sent, "0")
        async with env.hub.receiver("0", env.consumer_group, start=Position.earliest()) as receiver:
            got = await drain(receiver, 25, max_count=7)
        assert bodies(got) == sent
        assert [e.sequence_number for e in got] == list(range(25))
        offsets = [int(e.offset) for e in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == 25
        assert all(e.enqueued_time.tzinfo is not None for e in got)

    async def test_never_returns_more_than_max_count(self, env: HubEnv) -> None:
        await env.send([b"x"] * 10, "0")
        async with env.hub.receiver("0", env.consumer_group) as receiver:
            sizes = []
            for _ in range(20):
                batch = await receiver.receive_batch(3, max_wait=0.5)
                sizes.append(len(batch))
                if sum(sizes) >= 10:
                    break
        assert max(sizes) <= 3
        assert sum(sizes) == 10

    async def test_continues_exactly_after_the_last_batch(self, env: HubEnv) -> None:
        await env.send([b"a", b"b", b"c"], "1")
        async with env.hub.receiver("1", env.consumer_group) as receiver:
            first = await drain(receiver, 3)
            assert receiver.position == Position.from_sequence_number(2)
            await env.send([b"d", b"e"], "1")
            second = await drain(receiver, 2)
        assert bodies(first) == [b"a", b"b", b"c"]
        assert bodies(second) == [b"d", b"e"]

    async def test_empty_partition_returns_empty_list_after_max_wait(self, env: HubEnv) -> None:
        async with env.hub.receiver("1", env.consumer_group) as receiver:
            assert await receiver.receive_batch(10, max_wait=0.2) == []

    async def test_wakes_up_when_an_event_arrives_during_the_wait(self, env: HubEnv) -> None:
        async with env.hub.receiver("0", env.consumer_group) as receiver:
            await receiver.receive_batch(1, max_wait=0.1)  # attached, nothing there

            async def later() -> None:
                await asyncio.sleep(0.2)
                await env.send([b"late"], "0")

            task = asyncio.create_task(later())
            got = await drain(receiver, 1)
            await task
        assert bodies(got) == [b"late"]

    async def test_sequence_number_positions_inclusive_and_exclusive(self, env: HubEnv) -> None:
        await env.send([f"{i}".encode() for i in range(6)], "0")
        async with env.hub.receiver("0", env.consumer_group, start=Position.from_sequence_number(2)) as r:
            assert bodies(await drain(r, 3)) == [b"3", b"4", b"5"]
        start = Position.from_sequence_number(2, inclusive=True)
        async with env.hub.receiver("0", env.consumer_group, start=start) as r:
            assert bodies(await drain(r, 4)) == [b"2", b"3", b"4", b"5"]

    async def test_offset_positions(self, env: HubEnv) -> None:
        await env.send([b"a", b"b", b"c"], "0")
        async with env.hub.receiver("0", env.consumer_group) as r:
            events = await drain(r, 3)
        second = events[1]
        async with env.hub.receiver("0", env.consumer_group, start=Position.from_offset(second.offset)) as r:
            assert bodies(await drain(r, 1)) == [b"c"]
        start = Position.from_offset(second.offset, inclusive=True)
        async with env.hub.receiver("0", env.consumer_group, start=start) as r:
            assert bodies(await drain(r, 2)) == [b"b", b"c"]

    async def test_enqueued_time_position(self, env: HubEnv) -> None:
        await env.send([b"old"], "1")
        async with env.hub.receiver("1", env.consumer_group) as r:
            old = (await drain(r, 1))[0]
        await asyncio.sleep(0.05)
        await env.send([b"new"], "1")
        start = Position.from_enqueued_time(old.enqueued_time + dt.timedelta(milliseconds=1))
        async with env.hub.receiver("1", env.consumer_group, start=start) as r:
            assert bodies(await drain(r, 1)) == [b"new"]

    async def test_latest_skips_what_was_there(self, env: HubEnv) -> None:
        await env.send([b"before"], "0")
        async with env.hub.receiver("0", env.consumer_group, start=Position.latest()) as r:
            assert await r.receive_batch(10, max_wait=0.3) == []
            await env.send([b"after"], "0")
            assert bodies(await drain(r, 1)) == [b"after"]

    async def test_partition_properties(self, env: HubEnv) -> None:
        empty = await env.hub.get_partition_properties("1")
        assert empty.is_empty and empty.last_enqueued_sequence_number == -1
        await env.send([b"a", b"b"], "1")
        props = await env.hub.get_partition_properties("1")
        assert props.partition_id == "1"
        assert props.last_enqueued_sequence_number == 1 and not props.is_empty
        assert list(await env.hub.get_partition_ids())[:2] == ["0", "1"]

    async def test_last_enqueued_event_properties_after_a_pull(self, env: HubEnv) -> None:
        await env.send([b"a", b"b", b"c"], "0")
        async with env.hub.receiver("0", env.consumer_group) as r:
            await drain(r, 3)
            last = r.last_enqueued_event_properties
        assert last is not None and last.sequence_number == 2

    async def test_bad_arguments_raise_configuration_error(self, env: HubEnv) -> None:
        async with env.hub.receiver("0", env.consumer_group) as r:
            with pytest.raises(ConfigurationError):
                await r.receive_batch(0)
            with pytest.raises(ConfigurationError):
                await r.receive_batch(-5)
            with pytest.raises(ConfigurationError):
                await r.receive_batch(10, max_wait=-1)
        with pytest.raises(ConfigurationError):
            env.hub.receiver("0", env.consumer_group, start="earliest")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            env.hub.receiver("0", env.consumer_group, owner_level=-1)

    async def test_unknown_partition_raises_not_found(self, env: HubEnv) -> None:
        # The first pull raises, even one that does not wait: however slow the service, the answer is not "empty".
        with pytest.raises(NotFoundError):
            async with env.hub.receiver("999", env.consumer_group) as r:
                await r.receive_batch(1, max_wait=0)

    async def test_receive_after_close_raises_and_close_is_idempotent(self, env: HubEnv) -> None:
        r = env.hub.receiver("0", env.consumer_group)
        await r.receive_batch(1, max_wait=0.1)
        await r.close()
        await r.close()
        with pytest.raises(ReceiverClosedError):
            await r.receive_batch(1, max_wait=0.1)

    async def test_higher_owner_level_takes_the_partition(self, env: HubEnv) -> None:
        await env.send([b"a", b"b"], "0")
        old = env.hub.receiver("0", env.consumer_group, owner_level=1)
        try:
            first = await drain(old, 2)
            assert bodies(first) == [b"a", b"b"]
            async with env.hub.receiver("0", env.consumer_group, owner_level=2) as new:
                await env.send([b"c"], "0")
                assert bodies(await drain(new, 3)) == [b"a", b"b", b"c"]
                with pytest.raises(OwnershipLostError):
                    for _ in range(40):
                        await old.receive_batch(10, max_wait=0.25)
        finally:
            await old.close()

    async def test_lower_owner_level_is_refused_while_a_higher_one_reads(self, env: HubEnv) -> None:
        async with env.hub.receiver("1", env.consumer_group, owner_level=5) as high:
            await high.receive_batch(1, max_wait=0.1)
            low = env.hub.receiver("1", env.consumer_group, owner_level=1)
            try:
                with pytest.raises(OwnershipLostError):
                    for _ in range(10):
                        await low.receive_batch(1, max_wait=0.25)
            finally:
                await low.close()

    async def test_closing_releases_the_partition_for_a_new_reader(self, env: HubEnv) -> None:
        await env.send([b"a"], "0")
        async with env.hub.receiver("0", env.consumer_group, owner_level=3) as r:
            assert bodies(await drain(r, 1)) == [b"a"]
        async with env.hub.receiver("0", env.consumer_group, owner_level=1) as r2:
            assert bodies(await drain(r2, 1)) == [b"a"]

    async def test_independent_receivers_each_keep_their_own_position(self, env: HubEnv) -> None:
        await env.send([b"a", b"b", b"c"], "1")
        async with env.hub.receiver("1", env.consumer_group) as r1, env.hub.receiver(
            "1", env.consumer_group, start=Position.from_sequence_number(0)
        ) as r2:
            assert bodies(await drain(r1, 3)) == [b"a", b"b", b"c"]
            assert bodies(await drain(r2, 2)) == [b"b", b"c"]

    async def test_receive_nowait_hands_out_only_what_is_already_received(self, env: HubEnv) -> None:
        async with env.hub.receiver("1", env.consumer_group) as receiver:
            assert receiver.receive_nowait(10) == []  # nothing received yet; it never waits nor opens
            await env.send([b"a", b"b", b"c", b"d"], "1")
            first = await receiver.receive_batch(1, max_wait=5.0)
            rest = await drain_nowait(receiver, 3)
            assert bodies(first + rest) == [b"a", b"b", b"c", b"d"]
            assert receiver.receive_nowait(10) == []
            with pytest.raises(ConfigurationError):
                receiver.receive_nowait(0)
        with pytest.raises(ReceiverClosedError):
            receiver.receive_nowait(1)


async def drain_nowait(receiver: PartitionReceiver, expected: int) -> list[Event]:
    """What receive_nowait hands out, giving the transport time to receive (without ever pulling)."""
    got: list[Event] = []
    for _ in range(100):
        got.extend(receiver.receive_nowait(2))
        if len(got) >= expected:
            break
        await asyncio.sleep(0.05)
    return got
