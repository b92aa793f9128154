"""Large events end to end: the unmodified azure-eventhub producer sends them, rxhubs' native reader reads them.

An event of 1 MB (as large as Standard's 1 MiB limit takes) and one of 20 MB (Dedicated's; the emulator
configured for it with ``max_message_size``) go over the wire as deliveries of several transfer frames (the
service's annotations take the first past the 1 MiB frame). Each must come back byte for byte,
between small events, in order, read natively: the compiled reader joined its frames (no frame handed to the SDK).
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from rxhubs import Position
from rxhubs.emulator.pytest_plugin import EmulatorFactory, emulator_factory  # noqa: F401  (fixture)
from rxhubs.transport import EventHub
from rxhubs.transport._frames import compiled_reader

MB = 1000 * 1000


def _body(size: int, seed: int) -> bytes:
    block = hashlib.sha256(b"%d" % seed).digest() * 2048  # 64 KiB, not all one byte
    return (block * (size // len(block) + 1))[:size]


async def _send_with_the_sdk(conn: str, bodies: list[bytes]) -> None:
    async with EventHubProducerClient.from_connection_string(conn) as producer:
        for body in bodies:  # one batch each: a batch holds one large event
            batch = await producer.create_batch(partition_id="0")
            batch.add(EventData(body))
            await producer.send_batch(batch)


@pytest.mark.slow
@pytest.mark.parametrize(("size", "limit"), [(1024 * 1024 - 100, 1024 * 1024), (20 * MB, 21 * 1024 * 1024)],
                         ids=["1MB-standard", "20MB-dedicated"])
async def test_a_large_event_is_read_on_the_native_path(
    emulator_factory: EmulatorFactory, size: int, limit: int,  # noqa: F811
) -> None:
    assert compiled_reader() is not None, "make test builds the compiled frame reader; it is missing"
    emulator = emulator_factory(hubs={"big": 1}, max_message_size=limit)
    conn = emulator.connection_string("big")
    large = _body(size, 1)
    bodies = [b"before", large, b"after", _body(size // 2, 2), b"last"]
    await _send_with_the_sdk(conn, bodies)
    async with EventHub.from_connection_string(conn) as hub, hub.receiver("0", start=Position.earliest()) as receiver:
        got: list[bytes] = []
        for _ in range(60):
            got += [e.body for e in await receiver.receive_batch(10, max_wait=5)]
            if len(got) >= len(bodies):
                break
        assert [len(b) for b in got] == [len(b) for b in bodies]
        assert got == bodies
        native = receiver._native_link
        assert native is not None, "the receiver did not read on the native path"
        assert native.messages == len(bodies) and native.handed_back == 0


async def test_the_emulator_advertises_its_configured_maximum_message_size(
    emulator_factory: EmulatorFactory,  # noqa: F811
) -> None:
    emulator = emulator_factory(hubs={"big": 1}, max_message_size=2 * 1024 * 1024)
    conn = emulator.connection_string("big")
    async with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = await producer.create_batch(partition_id="0")
        assert batch.max_size_in_bytes == 2 * 1024 * 1024  # advertised on the link, as the service does
        with pytest.raises(ValueError):
            batch.add(EventData(b"x" * (2 * 1024 * 1024)))
    async with EventHub.from_connection_string(conn) as hub:
        assert (await asyncio.wait_for(hub.get_partition_properties("0"), 30)).is_empty


@pytest.mark.parametrize("size", [0, 1023, 256 * 1024 * 1024 + 1, 1.5, True])
def test_a_maximum_message_size_out_of_range_is_a_configuration_error(size: object) -> None:
    from rxhubs.emulator import Emulator
    from rxhubs.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="max_message_size"):
        Emulator(hubs={"h": 1}, max_message_size=size)  # type: ignore[arg-type]
