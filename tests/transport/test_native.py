"""The native receive path (rxhubs.transport._native) against the emulator: what it does itself, and what it leaves
to the SDK. The receiver contract runs on it and on the pure path (test_azure_receiver_contract.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time

import pytest

from rxhubs import Position
from rxhubs.emulator.pytest_plugin import EmulatorFactory, emulator_factory  # noqa: F401  (fixture)
from rxhubs.errors import OwnershipLostError
from rxhubs.transport import EventHub
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, compiled_reader
from rxhubs.transport._receiver import AzurePartitionReceiver
from tests.transport.envs import quiet_sdk  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NO_EXTENSIONS_VARIABLE, raising=False)
    assert compiled_reader() is not None, "make test builds the compiled frame reader; it is missing"


async def _read(receiver: AzurePartitionReceiver, count: int) -> list[int]:
    got: list[int] = []
    for _ in range(200):
        got += [e.sequence_number for e in await receiver.receive_batch(500, max_wait=5)]
        if len(got) >= count:
            break
    return got


async def test_credit_is_granted_back_in_bulk_and_reading_never_stalls(emulator_factory: EmulatorFactory) -> None:  # noqa: F811
    emulator = emulator_factory(hubs={"bulk": 1})
    async with EventHub.from_connection_string(emulator.connection_string("bulk")) as hub:
        await hub.send([b"%d" % i for i in range(1000)], partition_id="0")
        async with hub.receiver("0", start=Position.earliest(), prefetch=100) as receiver:
            assert await _read(receiver, 1000) == list(range(1000))  # 10x the credit: granted back in time
            native = receiver._native_link
            assert native is not None and native.messages == 1000 and native.handed_back == 0
            # once per half of the credit spent (the SDK grants only when none is left: a stop each time)
            assert 10 <= native.grants <= 1000 // 50 + 2


async def test_a_stolen_link_goes_through_the_sdk_and_surfaces_as_before(
    emulator_factory: EmulatorFactory, quiet_sdk: None  # noqa: F811
) -> None:
    emulator = emulator_factory(hubs={"steal": 1})
    async with EventHub.from_connection_string(emulator.connection_string("steal")) as hub:
        await hub.send([b"a", b"b"], partition_id="0")
        old = hub.receiver("0", start=Position.earliest(), owner_level=1)
        try:
            assert await _read(old, 2) == [0, 1]
            native = old._native_link  # type: ignore[attr-defined]
            assert native is not None and native.handed_back == 0
            async with hub.receiver("0", start=Position.earliest(), owner_level=2) as new:
                assert await _read(new, 2) == [0, 1]
                with pytest.raises(OwnershipLostError):
                    for _ in range(40):
                        await old.receive_batch(10, max_wait=0.25)
            assert native.handed_back >= 1  # the detach: read natively, processed by pyamqp
        finally:
            await old.close()


async def test_heartbeats_keep_an_idle_link_that_is_read(emulator_factory: EmulatorFactory) -> None:  # noqa: F811
    """The emulator closes a connection silent for 1.5 s; the native loop reads an idle link for 5 s on one link."""
    emulator = emulator_factory(hubs={"idle": 1}, idle_timeout=1.5)
    async with EventHub.from_connection_string(emulator.connection_string("idle")) as hub:
        await hub.send([b"first"], partition_id="0")
        async with hub.receiver("0", start=Position.earliest()) as receiver:
            assert await _read(receiver, 1) == [0]
            handler, native = receiver._direct_handler, receiver._native_link
            for _ in range(5):
                assert await receiver.receive_batch(10, max_wait=1.0) == []
            await hub.send([b"second"], partition_id="0")
            assert await _read(receiver, 1) == [1]
            # the same link all along: no reconnection after a close for silence
            assert (receiver._direct_handler, receiver._native_link) == (handler, native)
            assert native is not None and native.messages == 2


async def test_a_multi_frame_delivery_is_joined_natively_in_order(emulator_factory: EmulatorFactory) -> None:  # noqa: F811
    """An event near 1 MiB, stamped by the service, no longer fits one frame: the compiled reader joins its frames."""
    emulator = emulator_factory(hubs={"big": 1})
    big = bytes(range(256)) * (1_048_320 // 256)
    async with EventHub.from_connection_string(emulator.connection_string("big")) as hub:
        for body in (b"before", big, b"after"):
            await hub.send([body], partition_id="0")
        async with hub.receiver("0", start=Position.earliest()) as receiver:
            got: list[bytes] = []
            for _ in range(20):
                got += [e.body for e in await receiver.receive_batch(10, max_wait=5)]
                if len(got) >= 3:
                    break
            assert got == [b"before", big, b"after"]
            native = receiver._native_link
            assert native is not None and native.messages == 3 and native.handed_back == 0


@pytest.mark.parametrize("disabled", [False, True])
def test_the_path_is_said_once_at_info(disabled: bool) -> None:
    """A fresh process: one INFO line on rxhubs.transport, however many receivers open."""
    code = (
        "import logging; logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s')\n"
        "from rxhubs.transport._frames import log_receive_path\n"
        "log_receive_path(); log_receive_path()\n"
    )
    env = {**os.environ, NO_EXTENSIONS_VARIABLE: "1" if disabled else ""}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    said = [line for line in result.stderr.splitlines() if line.startswith("rxhubs.transport ")]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert said == [
        "rxhubs.transport receive path: pure-Python (RXHUBS_NO_EXTENSIONS is set)" if disabled
        else f"rxhubs.transport receive path: native (compiled frame reader: _frames_c{suffix})"
    ], result.stderr


async def test_an_idle_link_looks_at_heartbeats_and_the_token_only_when_due(
    emulator_factory: EmulatorFactory, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """No traffic and no heartbeats asked for: the link is read for 3 s with no tick (it was one a second)."""
    from rxhubs.transport._native import NativeLink

    ticks: list[float] = []
    tick = NativeLink._tick

    async def counted(self: NativeLink) -> bool:
        ticks.append(time.monotonic())
        return await tick(self)

    monkeypatch.setattr(NativeLink, "_tick", counted)
    emulator = emulator_factory(hubs={"quiet": 1})
    async with EventHub.from_connection_string(emulator.connection_string("quiet"), idle_timeout=None) as hub:
        await hub.send([b"first"], partition_id="0")
        async with hub.receiver("0", start=Position.earliest()) as receiver:
            assert await _read(receiver, 1) == [0]
            native = receiver._native_link
            assert native is not None
            wait = native._tick_every()
            assert 10 <= wait <= 15  # the emulator's idle timeout is 120 s; the connection string's token an hour
            ticks.clear()
            assert await receiver.receive_batch(10, max_wait=3.0) == []
            assert ticks == []
            await hub.send([b"second"], partition_id="0")
            assert await _read(receiver, 1) == [1]  # read at once: bytes end the wait, not the tick


def test_the_idle_wait_is_bounded_by_the_service_idle_timeout_and_the_token_refresh() -> None:
    from types import SimpleNamespace

    from rxhubs.transport._native import NativeLink

    link = NativeLink.__new__(NativeLink)
    link._connection = SimpleNamespace(_remote_idle_timeout_send_frame=None)
    link._handler = SimpleNamespace(_cbs_authenticator=None)
    assert link._tick_every() == 15.0  # nothing asks for more
    link._connection = SimpleNamespace(_remote_idle_timeout_send_frame=4.0)
    assert link._tick_every() == 2.0  # heartbeats every 4 s at most: look twice as often
    link._connection = SimpleNamespace(_remote_idle_timeout_send_frame=60.0)
    auth = SimpleNamespace(_expires_on=time.time() + 3600, _refresh_window=360)
    link._handler = SimpleNamespace(_cbs_authenticator=auth)
    assert link._tick_every() == 15.0
    auth._expires_on = time.time() + 366  # refresh due in about 6 s
    assert 5.0 <= link._tick_every() <= 6.0
    auth._expires_on = time.time() + 100  # refresh due already (under way): once a second, as before
    assert link._tick_every() == 1.0
    link._handler = SimpleNamespace(_cbs_authenticator=SimpleNamespace())  # expiry unknown: once a second
    assert link._tick_every() == 1.0
