"""Warm sessions (``rxhubs/transport/_warm.py``) against the emulator with the unmodified SDK: sessions opened ahead
of a handover are taken by the receivers that open next, which attach only their link on them and then read, are
cut off and close like any receiver; the sessions nobody takes are closed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from rxhubs import Position
from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.errors import OwnershipLostError
from rxhubs.transport import EventHub
from tests.transport.test_azure_hub import KEY, drain, seqs

GROUP = "$Default"


@pytest.fixture
def emulator(emulator_factory: EmulatorFactory) -> BackgroundEmulator:  # noqa: F811
    return emulator_factory(hubs={"telemetry": 2}, shared_access_key=KEY, verify_tokens=True)


@pytest.fixture
async def hub(emulator: BackgroundEmulator) -> AsyncIterator[EventHub]:
    async with EventHub.from_connection_string(emulator.connection_string("telemetry")) as hub:
        yield hub


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for ``condition`` (a bound for a broken build, not a speed limit)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_receivers_attach_their_links_on_the_sessions_prepared_and_read_as_any_receiver(hub: EventHub) -> None:
    await hub.send([b"a", b"b", b"c"], partition_id="0")
    await hub.send([b"d", b"e"], partition_id="1")
    hub._warm.prepare(GROUP, 2, ttl=60.0)
    await until(lambda: hub._warm.ready(GROUP) == 2)
    prepared = {id(handler._connection) for handler in hub._warm._ready[GROUP]}

    first = hub.receiver("0", start=Position.from_sequence_number(0), owner_level=1)
    second = hub.receiver("1", owner_level=1)
    assert seqs(await drain(first, 2)) == [1, 2]  # its own partition and position, on a session opened for neither
    assert seqs(await drain(second, 2)) == [0, 1]
    assert hub._warm.taken == 2 and hub._warm.ready(GROUP) == 0
    assert {id(r._direct_handler._connection) for r in (first, second)} == prepared  # type: ignore[attr-defined]

    thief = hub.receiver("0", owner_level=2, start=Position.latest())  # its own connection: none is prepared
    await thief.receive_batch(1, max_wait=0.5)
    with pytest.raises(OwnershipLostError):  # the owner level is the receiver's own
        await drain(first, 1)
    third = hub.receiver("1", owner_level=1, start=Position.earliest())
    assert seqs(await drain(third, 2)) == [0, 1] and hub._warm.taken == 2
    for receiver in (first, second, thief, third):
        await receiver.close()


async def test_sessions_nobody_takes_are_closed_after_the_last_prepare_and_with_the_hub(hub: EventHub) -> None:
    hub._warm.prepare(GROUP, 2, ttl=1.0)
    await until(lambda: hub._warm.ready(GROUP) == 2)
    connections = [handler._connection for handler in hub._warm._ready[GROUP]]
    hub._warm.prepare(GROUP, 2, ttl=1.0)  # a round that still awaits: kept, none opened
    assert hub._warm.opened == 2
    await until(lambda: hub._warm.expired == 2)
    assert hub._warm.take(GROUP) is None
    await until(lambda: all(c.state.name == "END" for c in connections))

    hub._warm.prepare(GROUP, 1, ttl=60.0)
    await until(lambda: hub._warm.ready(GROUP) == 1)
    kept = hub._warm._ready[GROUP][0]._connection
    await hub.close()
    assert kept.state.name == "END" and hub._warm.ready(GROUP) == 0


async def test_a_session_that_waited_longer_than_the_idle_timeout_still_serves_its_receiver(
    emulator: BackgroundEmulator,
) -> None:
    """Nothing reads a prepared session until a receiver takes it: pyamqp's own idle check would close it at that
    first read. It is off on prepared sessions, as on every receiver's connection; the receiver's watchdog decides."""
    async with EventHub.from_connection_string(emulator.connection_string("telemetry"), idle_timeout=1.0) as hub:
        await hub.send([b"a", b"b"], partition_id="0")
        hub._warm.prepare(GROUP, 1, ttl=60.0)
        await until(lambda: hub._warm.ready(GROUP) == 1)
        [prepared] = [handler._connection for handler in hub._warm._ready[GROUP]]
        attached = len(emulator.link_log)
        await asyncio.sleep(1.5)  # three times the idle timeout the connection asked for, unread
        receiver = hub.receiver("0", owner_level=1)
        assert seqs(await drain(receiver, 2)) == [0, 1]
        assert hub._warm.taken == 1
        # it read on the prepared session, not on one it opened after that one failed: the same connection, still
        # open, and the emulator saw one link attached since (a second attach would be a silent reopen)
        assert receiver._direct_handler._connection is prepared  # type: ignore[attr-defined]
        assert prepared.state.name != "END"
        links = emulator.link_log[attached:]
        assert [(r.event, r.partition_id) for r in links] == [("attach", "0")], links
        await receiver.close()
