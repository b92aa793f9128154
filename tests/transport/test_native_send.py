"""The native send path (:mod:`rxhubs.transport._native_send`) against the emulator, read back by the real SDK path.

Every test asserts that its sends went out natively (deliveries written by rxhubs, not by ``send_batch``), and the
fallback test runs a process without the compiled encoder and checks that it says so once and still sends.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from rxhubs.errors import ConfigurationError
from rxhubs.transport._native_send import NativeSender
from rxhubs.transport._producer import OversizedEventError
from rxhubs.transport._publisher import EventColumns, OutgoingEvent

ROOT = Path(__file__).resolve().parents[2]


def _natives(hub: rxhubs.EventHub) -> dict[str | None, NativeSender]:
    return dict(hub._senders._senders)


async def _read(hub: rxhubs.EventHub, partition_id: str, count: int) -> list[rxhubs.Event]:
    got: list[rxhubs.Event] = []
    async with hub.receiver(partition_id, start=rxhubs.Position.earliest()) as receiver:
        while len(got) < count:
            batch = await receiver.receive_batch(1000, max_wait=5.0)
            assert batch, f"partition {partition_id}: {len(got)} of {count} events arrived"
            got += batch
    return got


def _events(n: int, tag: str) -> list[OutgoingEvent]:
    return [
        OutgoingEvent(f"{tag}-{i}".encode() * (1 + i % 40) * 10, {"i": i, "tag": tag, "f": i / 3, "ok": i % 2 == 0})
        for i in range(n)
    ]


async def test_events_sent_natively_arrive_in_order_with_properties_and_keys(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 2})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
        by_id = _events(3000, "p")
        await hub.publish(by_id, partition_id="0")
        keyed = _events(500, "k")
        await hub.publish(keyed, partition_key="device-7")
        senders = _natives(hub)
        assert set(senders) == {"0", None} and all(s.deliveries > 0 for s in senders.values())
        assert senders["0"].deliveries >= 3  # 3000 events of 1.2 KB on average: batch messages of 1 MiB
        sizes = [(await hub.get_partition_properties(p)).last_enqueued_sequence_number + 1 for p in ("0", "1")]
        assert sum(sizes) == 3500
        got = {p: await _read(hub, p, n) for p, n in zip(("0", "1"), sizes, strict=True) if n}
        mine = [e for e in got["0"] if e.properties["tag"] == "p"]
        assert [e.body for e in mine] == [e.body for e in by_id]
        assert [e.properties for e in mine] == [dict(e.properties) for e in by_id]
        theirs = {p: [e for e in events if e.properties["tag"] == "k"] for p, events in got.items()}
        (keyed_got,) = [events for events in theirs.values() if events]  # one key: one partition
        assert [e.body for e in keyed_got] == [e.body for e in keyed]
        assert {e.partition_key for e in keyed_got} == {"device-7"}


async def test_concurrent_sends_pipeline_on_one_link_and_each_keeps_its_order(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 1})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
        calls = [_events(400, f"c{c}") for c in range(12)]
        await asyncio.gather(*(hub.publish(events, partition_id="0") for events in calls))
        sender = _natives(hub)["0"]
        assert sender.writes >= 12
        got = await _read(hub, "0", 12 * 400)
        for c, events in enumerate(calls):
            mine = [e.body for e in got if e.properties["tag"] == f"c{c}"]
            assert mine == [e.body for e in events]


async def test_an_oversized_event_is_refused_after_the_events_before_it_were_acknowledged(
    emulator_factory: Any,
) -> None:
    emulator = emulator_factory(hubs={"h": 1})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
        small = _events(5, "s")
        big = OutgoingEvent(b"x" * (1024 * 1024 + 10))
        pending = [*small, big, *_events(3, "after")]
        with pytest.raises(ConfigurationError) as caught:
            await hub._senders.send(hub._producer_client(), pending, "0", None)
        assert isinstance(caught.value, OversizedEventError) and caught.value.event is big
        assert pending[0] is big  # the five before it were acknowledged and left `pending`
        assert _natives(hub)["0"].deliveries == 1
        assert [e.body for e in await _read(hub, "0", 5)] == [e.body for e in small]
        with pytest.raises(ConfigurationError, match="larger than the hub's maximum message size"):
            await hub.publish([big], partition_id="0")


async def test_the_link_reopens_after_the_emulator_restarts_and_nothing_acknowledged_is_lost(
    emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = emulator_factory(hubs={"h": 1}, data_dir=tmp_path)
    conn = emulator.connection_string("h")
    async with rxhubs.EventHub.from_connection_string(conn, retry_total=8, retry_backoff_factor=0.2) as hub:
        first = _events(200, "before")
        await hub.publish(first, partition_id="0")
        old = _natives(hub)["0"]
        emulator.stop()
        emulator = emulator_factory(hubs={"h": 1}, data_dir=tmp_path, port=int(conn.split(":")[2].split(";")[0]))
        second = _events(200, "after")
        await hub.publish(second, partition_id="0")  # the broken link fails, is mapped, reopened, sent on
        assert _natives(hub)["0"] is old and old.deliveries >= 2
        got = await _read(hub, "0", 400)
        assert [e.body for e in got] == [e.body for e in first + second]


def test_without_the_compiled_encoder_sends_go_through_the_sdk_and_say_so_once(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"h": 1})
    script = textwrap.dedent(
        """
        import asyncio, logging, sys
        import rxhubs
        from rxhubs.transport._publisher import OutgoingEvent
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
        async def main():
            for _ in range(2):
                async with rxhubs.EventHub.from_connection_string(sys.argv[1]) as hub:
                    await hub.publish([OutgoingEvent(b"a"), OutgoingEvent(b"b")], partition_id="0")
                    assert not hub._senders._senders, "a native sender was made"
        asyncio.run(main())
        """
    )
    env = {**os.environ, "RXHUBS_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", script, emulator.connection_string("h")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "send path:" in line]
    assert said == ["rxhubs.transport send path: azure-eventhub's send_batch (RXHUBS_NO_EXTENSIONS is set)"]

    async def count() -> int:
        async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
            return (await hub.get_partition_properties("0")).last_enqueued_sequence_number + 1

    assert asyncio.run(count()) == 4


async def test_a_property_the_encoder_does_not_take_sends_that_call_through_the_sdk(emulator_factory: Any) -> None:
    import uuid

    emulator = emulator_factory(hubs={"h": 1})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
        await hub.publish(_events(3, "native"), partition_id="0")
        sender = _natives(hub)["0"]
        written = sender.deliveries
        odd = OutgoingEvent(b"odd", {"id": uuid.UUID(int=7)})
        await hub.publish([odd], partition_id="0")  # a UUID value: send_batch sends this call
        assert sender.deliveries == written
        await hub.publish(_events(2, "again"), partition_id="0")  # and the link stays native
        assert sender.deliveries == written + 1
        got = await _read(hub, "0", 6)
        assert [e.body for e in got][3] == b"odd" and len(got) == 6


async def test_events_as_columns_are_sent_natively_like_the_same_events(emulator_factory: Any) -> None:
    import uuid

    emulator = emulator_factory(hubs={"h": 1})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string("h")) as hub:
        shared = EventColumns([f"s{i}".encode() * 50 for i in range(2000)], {"tag": "s", "n": 1})
        each = _events(700, "e")
        per_event = EventColumns([e.body for e in each], [e.properties for e in each])
        await hub.publish(shared, partition_id="0")
        await hub.publish(per_event, partition_id="0")
        sender = _natives(hub)["0"]
        assert sender.deliveries >= 2 and len(shared) == 2000  # sent natively; the caller's columns untouched
        got = await _read(hub, "0", 2700)
        assert [(e.body, e.properties) for e in got[:2000]] == [(b, {"tag": "s", "n": 1}) for b in shared.bodies]
        assert [(e.body, e.properties) for e in got[2000:]] == [(e.body, dict(e.properties)) for e in each]

        big = b"x" * (1024 * 1024 + 10)
        pending = EventColumns([b"a", b"b", big, b"c"], {"tag": "big"})
        with pytest.raises(OversizedEventError) as caught:
            await hub._senders.send(hub._producer_client(), pending, "0", None)
        assert caught.value.event.body is big and pending.bodies[0] is big  # what was acknowledged left it
        written = sender.deliveries
        odd = EventColumns([b"odd", b"ball"], [{"id": uuid.UUID(int=7)}, {}])  # a UUID: send_batch sends it
        await hub.publish(odd, partition_id="0")
        assert sender.deliveries == written
        got = await _read(hub, "0", 2704)
        assert [e.body for e in got[2700:]] == [b"a", b"b", b"odd", b"ball"]
