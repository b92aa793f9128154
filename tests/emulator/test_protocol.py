"""Protocol-level behaviour seen from a raw AMQP client: errors, credit, heartbeats, limits, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from rxhubs.emulator import Emulator
from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import Symbol, UInt

from ._raw import RawClient, data_message

pytestmark = pytest.mark.timeout(30)

HUB = "h"
CG = f"amqps://127.0.0.1/{HUB}/ConsumerGroups/$Default/Partitions"


async def _send_events(client: RawClient, count: int, address: str = f"amqps://127.0.0.1/{HUB}/Partitions/0",
                       ) -> None:
    client.attach_sender(9, address)
    await client.expect(fr.ATTACH)
    for i in range(count):
        client.send(0, fr.TRANSFER, [UInt(9), UInt(i), bytes([0, 0, 0, i]), UInt(0), False, False],
                    data_message(b"event-%d" % i))
        disposition = await client.expect(fr.DISPOSITION)
        assert disposition.field(4).descriptor == fr.ACCEPTED


async def test_unknown_partition_consumer_group_and_hub_detach_not_found() -> None:
    async with Emulator(hubs={HUB: 2}) as emulator:
        client = await RawClient.connect(emulator.port)
        for handle, address in enumerate([f"{CG}/7", f"amqps://127.0.0.1/{HUB}/ConsumerGroups/nope/Partitions/0",
                                          "amqps://127.0.0.1/missing/ConsumerGroups/$Default/Partitions/0"]):
            client.attach_receiver(handle, address)
            await client.expect(fr.ATTACH)
            detach = await client.expect(fr.DETACH)
            assert detach.field(1) is True
            assert detach.field(2).value[0] == "amqp:not-found"
        client.attach_sender(5, f"amqps://127.0.0.1/{HUB}/Partitions/9")
        await client.expect(fr.ATTACH)
        assert (await client.expect(fr.DETACH)).field(2).value[0] == "amqp:not-found"
        await client.close()


async def test_never_sends_past_the_credit() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        client = await RawClient.connect(emulator.port)
        await _send_events(client, 10)
        client.attach_receiver(1, f"{CG}/0", "amqp.annotation.x-opt-offset > '-1'")
        attach = await client.expect(fr.ATTACH)
        assert attach.field(9) == 0  # initial delivery count
        client.flow(1, credit=3)
        transfers = [await client.expect(fr.TRANSFER) for _ in range(3)]
        client.flow(1, credit=0, delivery_count=3, echo=True)
        while True:  # the echoed flow must come before any fourth transfer
            _, perf = await client.read_frame()
            assert perf is None or perf.code != fr.TRANSFER
            if perf is not None and perf.code == fr.FLOW and perf.field(4) is not None:
                break
        assert perf.field(6) == 0 and perf.field(7) == 7  # no credit left, 7 events available
        assert [t.field(1) for t in transfers] == [0, 1, 2]
        client.flow(1, credit=100, delivery_count=3)
        rest = [await client.expect(fr.TRANSFER) for _ in range(7)]
        assert b"event-9" in rest[-1].payload
        await client.close()


async def test_heartbeats_follow_the_client_idle_timeout() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        client = await RawClient.connect(emulator.port, idle_timeout_ms=200)
        async with asyncio.timeout(5):
            while (await client.read_frame())[1] is not None:
                pass  # an empty frame arrived
        await client.close()


async def test_idle_connection_is_closed() -> None:
    async with Emulator(hubs={HUB: 1}, idle_timeout=0.3) as emulator:
        client = await RawClient.connect(emulator.port)
        close = await client.expect(fr.CLOSE)
        assert close.field(0).value[0] == "amqp:resource-limit-exceeded"
        await client.close()


async def test_shutdown_detaches_and_closes() -> None:
    emulator = Emulator(hubs={HUB: 1})
    await emulator.start()
    client = await RawClient.connect(emulator.port)
    client.attach_receiver(1, f"{CG}/0")
    await client.expect(fr.ATTACH)
    stopping = asyncio.create_task(emulator.stop())
    detach = await client.expect(fr.DETACH)
    assert detach.field(2).value[0] == "amqp:link:detach-forced"
    close = await client.expect(fr.CLOSE)
    assert close.field(0).value[0] == "amqp:connection:forced"
    client.send(0, fr.CLOSE, [None])
    await stopping
    await client.close()


async def test_multi_frame_message_and_size_limit() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        client = await RawClient.connect(emulator.port)
        client.attach_sender(1, f"amqps://127.0.0.1/{HUB}")
        attach = await client.expect(fr.ATTACH)
        assert attach.field(10) == 1024 * 1024
        message = data_message(b"z" * 3000)
        parts = [message[:1000], message[1000:2000], message[2000:]]
        for i, part in enumerate(parts):
            more = i < 2
            client.send(0, fr.TRANSFER, [UInt(1), UInt(0), b"t0", UInt(0), False, more], part)
        assert (await client.expect(fr.DISPOSITION)).field(4).descriptor == fr.ACCEPTED
        chunk = data_message(b"q" * 60000)
        for i in range(19):  # about 1.1 MiB in 19 frames
            client.send(0, fr.TRANSFER, [UInt(1), UInt(1), b"t1", UInt(0), False, i < 18], chunk)
        rejected = await client.expect(fr.DISPOSITION)
        assert rejected.field(4).descriptor == fr.REJECTED
        assert rejected.field(4).value[0].value[0] == "amqp:link:message-size-exceeded"
        client.send(0, fr.TRANSFER, [UInt(1), UInt(2), b"t2", UInt(0), False, False], data_message(b"ok"))
        assert (await client.expect(fr.DISPOSITION)).field(4).descriptor == fr.ACCEPTED
        await client.close()
        assert emulator._server is not None
        partition = emulator._server.hubs[HUB].partitions["0"]
        assert partition.last_sequence_number == 1


async def test_oversized_frame_closes_only_that_connection() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        good = await RawClient.connect(emulator.port)
        bad = await RawClient.connect(emulator.port)
        bad.writer.write(b"\x7f\xff\xff\xff\x02\x00\x00\x00")
        close = await bad.expect(fr.CLOSE)
        assert close.field(0).value[0] == "amqp:connection:framing-error"
        await _send_events(good, 1)
        await good.close()
        await bad.close()


async def test_epoch_property_on_raw_links() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        client = await RawClient.connect(emulator.port)
        epoch = Symbol("com.microsoft:epoch")
        client.attach_receiver(1, f"{CG}/0", properties={epoch: 5})
        await client.expect(fr.ATTACH)
        client.attach_receiver(2, f"{CG}/0", properties={epoch: 5})  # an equal owner level takes over
        seen = {}
        while len(seen) < 2:
            _, perf = await client.read_frame()
            if perf is not None and perf.code in (fr.ATTACH, fr.DETACH):
                seen[perf.code] = perf
        assert seen[fr.DETACH].field(0) == 0 and seen[fr.DETACH].field(2).value[0] == "amqp:link:stolen"
        assert seen[fr.ATTACH].field(0) == "r2"
        client.attach_receiver(3, f"{CG}/0", properties={epoch: 4})  # a lower one is refused
        await client.expect(fr.ATTACH)
        refused = await client.expect(fr.DETACH)
        assert refused.field(0) == 2 and refused.field(2).value[0] == "amqp:link:stolen"
        await client.close()
