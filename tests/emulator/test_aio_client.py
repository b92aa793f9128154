"""Conformance: the official aio azure-eventhub clients against the emulator."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import ConnectError, EventHubError

from rxhubs.emulator import Emulator
from rxhubs.emulator._partition_key import partition_for_key

from ._sdk import AioReceiver, asend

pytestmark = pytest.mark.timeout(60)

HUB = "telemetry"


async def _send(producer: EventHubProducerClient, bodies: list[str], **options: object) -> None:
    batch = await producer.create_batch(**options)
    for body in bodies:
        batch.add(EventData(body))
    await producer.send_batch(batch)


async def test_properties_and_send_modes() -> None:
    async with Emulator(hubs={HUB: 3}) as emulator:
        conn = emulator.connection_string(HUB)
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            props = await producer.get_eventhub_properties()
            assert props["eventhub_name"] == HUB and props["partition_ids"] == ["0", "1", "2"]
            for i in range(6):
                await _send(producer, [f"rr-{i}"])
            await _send(producer, ["k1", "k2"], partition_key="sensor-7")
            await _send(producer, [f"p-{i}" for i in range(50)], partition_id="1")
            await producer.send_event(EventData("single"))
            parts = await asyncio.gather(*(producer.get_partition_properties(p) for p in "012"))
        counts = [p["last_enqueued_sequence_number"] + 1 for p in parts]
        expected = [2, 2, 2]
        expected[partition_for_key("sensor-7", 3)] += 2
        expected[1] += 50
        expected[0] += 1  # round robin comes back to partition 0
        assert counts == expected
        async with AioReceiver(conn, "1", starting_position="-1") as receiver:
            got = await receiver.wait_events(expected[1])
        bodies = [e.body_as_str() for e in got]
        assert [b for b in bodies if b.startswith("p-")] == [f"p-{i}" for i in range(50)]
        assert [e.sequence_number for e in got] == list(range(len(got)))


async def test_start_positions() -> None:
    groups = [f"cg{i}" for i in range(6)]
    async with Emulator(hubs={HUB: 1}, consumer_groups=groups) as emulator:
        conn = emulator.connection_string(HUB)
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            for start, stop in ((0, 3), (3, 6), (6, 9)):
                await _send(producer, [f"e{i}" for i in range(start, stop)])
                await asyncio.sleep(0.005)
        async with AioReceiver(conn, "0", starting_position="-1") as receiver:
            events = (await receiver.wait_events(9))[:9]
        cases: list[tuple[object, bool, int]] = [
            (events[2].offset, True, 2),
            (events[2].offset, False, 3),
            (7, True, 7),
            (7, False, 8),
            (events[3].enqueued_time, True, 3),
            (events[3].enqueued_time, False, 6),
        ]
        receivers = [AioReceiver(conn, "0", consumer_group=group, starting_position=pos,
                                 starting_position_inclusive=inc)
                     for group, (pos, inc, _) in zip(groups, cases, strict=True)]
        for r in receivers:
            await r.__aenter__()
        try:
            got = await asyncio.gather(*(r.wait_events(9 - first) for r, (_, _, first) in zip(receivers, cases,
                                                                                              strict=True)))
        finally:
            await asyncio.gather(*(r.__aexit__(None, None, None) for r in receivers))
        for (pos, inc, first), seen in zip(cases, got, strict=True):
            assert [e.sequence_number for e in seen] == list(range(first, 9)), (pos, inc)
        assert all(e.enqueued_time.tzinfo == datetime.UTC for e in events)


async def test_owner_level_steals_and_refuses() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        await asend(conn, ["a", "b"])
        async with AioReceiver(conn, "0", starting_position="-1", owner_level=1) as first:
            assert len(await first.wait_events(2)) == 2
            async with AioReceiver(conn, "0", starting_position="-1", owner_level=2) as second:
                assert len(await second.wait_events(2)) == 2
                stolen = await first.wait_error()
                assert stolen is not None and "amqp:link:stolen" in str(stolen)
                lower = AioReceiver(conn, "0", starting_position="-1", owner_level=1)
                plain = AioReceiver(conn, "0", starting_position="-1")  # no owner level
                async with lower, plain:
                    refusals = await asyncio.gather(lower.wait_error(), plain.wait_error())
                    assert all(r is not None and "amqp:link:stolen" in str(r) for r in refusals), refusals
                    assert not lower.events and not plain.events
                await asend(conn, ["c"])
                assert [e.body_as_str() for e in await second.wait_events(3)] == ["a", "b", "c"]


async def test_at_most_five_readers_per_partition_and_group() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        await asend(conn, ["x"])
        readers = [AioReceiver(conn, "0", starting_position="-1") for _ in range(5)]
        for r in readers:
            await r.__aenter__()
        try:
            await asyncio.gather(*(r.wait_events(1) for r in readers))
            async with AioReceiver(conn, "0", starting_position="-1") as sixth:
                error = await sixth.wait_error()
                assert error is not None and "amqp:resource-limit-exceeded" in str(error)
        finally:
            await asyncio.gather(*(r.__aexit__(None, None, None) for r in readers))


async def test_runtime_metrics() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        await asend(conn, [f"m{i}" for i in range(5)])
        client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
        seen: list[dict[str, object] | None] = []
        done = asyncio.Event()

        async def on_event(ctx: object, event: EventData | None) -> None:
            if event is not None:
                seen.append(ctx.last_enqueued_event_properties)  # type: ignore[attr-defined]
                if len(seen) == 5:
                    done.set()

        task = asyncio.create_task(client.receive(on_event=on_event, partition_id="0", starting_position="-1",
                                                  track_last_enqueued_event_properties=True))
        try:
            await asyncio.wait_for(done.wait(), 20)
        finally:
            await client.close()
            task.cancel()  # the SDK's processor otherwise notices the stop only after a load-balancing interval
            await asyncio.gather(task, return_exceptions=True)
        last = seen[-1]
        assert last is not None
        assert last["sequence_number"] == 4
        assert isinstance(last["offset"], str) and int(last["offset"]) > 0
        assert isinstance(last["enqueued_time"], datetime.datetime)
        assert isinstance(last["retrieval_time"], datetime.datetime)


async def test_oversized_event_rejected_and_unknown_hub() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            with pytest.raises(EventHubError):
                await producer.send_event(EventData(b"y" * (1024 * 1024 + 1)))
            await producer.send_event(EventData(b"f" * 1_048_520))  # fits; with annotations it spans 2 frames
        async with AioReceiver(conn, "0", starting_position="-1") as receiver:
            (event,) = await receiver.wait_events(1)
            assert event.body_as_str() == "f" * 1_048_520
        bad = conn.replace(f"EntityPath={HUB}", "EntityPath=missing")
        async with EventHubProducerClient.from_connection_string(bad, retry_total=0) as producer:
            with pytest.raises(EventHubError):
                await producer.get_eventhub_properties()
            with pytest.raises(ConnectError):
                await producer.send_event(EventData("x"))


async def test_restart_with_data_dir_keeps_every_event(tmp_path: Path) -> None:
    async with Emulator(hubs={HUB: 2}, data_dir=tmp_path) as emulator:
        conn = emulator.connection_string(HUB)
        port = emulator.port
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            await _send(producer, [f"a{i}" for i in range(20)], partition_id="0")
            await _send(producer, [f"b{i}" for i in range(5)], partition_key="k")
            before = await asyncio.gather(*(producer.get_partition_properties(p) for p in "01"))
    async with Emulator(hubs={HUB: 2}, data_dir=tmp_path, port=port) as emulator:
        conn = emulator.connection_string(HUB)
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            after = await asyncio.gather(*(producer.get_partition_properties(p) for p in "01"))
            assert after == before
            await _send(producer, ["after-restart"], partition_id="0")
        async with AioReceiver(conn, "0", starting_position="-1") as receiver:
            got = await receiver.wait_events(after[0]["last_enqueued_sequence_number"] + 2)
        assert got[-1].body_as_str() == "after-restart"
        assert got[-1].sequence_number == after[0]["last_enqueued_sequence_number"] + 1
        assert int(got[-1].offset) > int(after[0]["last_enqueued_offset"])


async def test_verify_tokens_checks_the_sas_key() -> None:
    from azure.eventhub.exceptions import AuthenticationError

    async with Emulator(hubs={HUB: 1}, verify_tokens=True, shared_access_key="s3cret") as emulator:
        conn = emulator.connection_string(HUB)
        async with EventHubProducerClient.from_connection_string(conn) as producer:
            assert (await producer.get_eventhub_properties())["eventhub_name"] == HUB
        wrong = conn.replace("SharedAccessKey=s3cret", "SharedAccessKey=guess")
        async with EventHubProducerClient.from_connection_string(wrong, retry_total=0) as producer:
            with pytest.raises(AuthenticationError):
                await producer.send_event(EventData("x"))
