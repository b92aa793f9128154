"""Liveness of a receiver's path (rxhubs.transport._liveness) against the emulator: what must NOT count as a dead path.

A quiet partition (the service heartbeats) and a receiver that is not pulled (backpressure: the link is not read)
must never be taken for a silent path; the fault proxy tests (tests/faults/test_silent_path.py) show that a
really silent one is noticed. Idle timeouts are short here (1-2 s) so that a false stall would show within the
test.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from rxhubs import Position
from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.errors import ConfigurationError, TransportError
from rxhubs.transport import EventHub, _paths
from rxhubs.transport._direct import DIRECT_VARIABLE
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, compiled_reader
from rxhubs.transport._frames import receive_path as receive_path_now
from rxhubs.transport._liveness import Liveness, Watchdog, bounded

IDLE = 1.0


@pytest.fixture(autouse=True)
def quiet_sdk() -> Iterator[None]:
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


_PATH_OF = {"native": "native", "direct": "sdk-loop", "public": "public"}


@pytest.fixture(params=["native", "direct", "public"])
def receive_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """native: the compiled frame reader (it sends the heartbeats itself); direct: our loop over pyamqp's reads.

    Every link the test opened must have read on the path of its case (the suite's autouse fixture already
    fails a link that fell back; this also catches a case that never reached its path).
    """
    if request.param == "public":
        monkeypatch.setenv(DIRECT_VARIABLE, "0")
    if request.param == "direct":
        monkeypatch.setenv(NO_EXTENSIONS_VARIABLE, "1")
    if request.param == "native":
        monkeypatch.delenv(NO_EXTENSIONS_VARIABLE, raising=False)
        assert compiled_reader() is not None, f"the native case needs the compiled build: {receive_path_now()}"
    yield str(request.param)
    paths = {link.path for link in _paths.opened()}
    assert paths <= {_PATH_OF[request.param]}, f"{request.param} case read on {paths}"


def _stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rxhubs.liveness" and r.levelno >= logging.WARNING]


# -- settings ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"idle_timeout": 0}, "idle_timeout must be a number of seconds > 0 or None, got 0"),
        ({"idle_timeout": -1.5}, "idle_timeout must be a number of seconds > 0 or None"),
        ({"idle_timeout": "10"}, "idle_timeout must be a number of seconds > 0 or None"),
        ({"idle_timeout": float("inf")}, "idle_timeout must be a number of seconds > 0 or None"),
        ({"open_timeout": None}, "open_timeout must be a number of seconds > 0, got None"),
        ({"management_timeout": 0}, "management_timeout must be a number of seconds > 0, got 0"),
        ({"idle_timeout": True}, "idle_timeout must be a number of seconds > 0 or None"),
    ],
)
def test_bad_liveness_settings_are_configuration_errors(options: dict[str, object], message: str) -> None:
    conn = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0;UseDevelopmentEmulator=true"
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EventHub.from_connection_string(conn, "h", **options)


def test_defaults_and_disabling() -> None:
    assert Liveness.parse({}) == Liveness(10.0, 30.0, 30.0)
    assert Liveness.parse({}).advertised == 5.0  # half goes in the AMQP Open, as the spec advises
    assert Liveness.parse({"idle_timeout": None}).advertised is None


# -- the watchdog's arithmetic, on a clock of its own -------------------------------------------------------------


class _Frames:
    """What a watchdog reads of a pyamqp connection: when its last frame arrived, and its state."""

    def __init__(self) -> None:
        self._last_frame_received_time: float | None = None
        self.state = None


def test_the_watchdog_counts_only_silence_while_reading() -> None:
    now = [0.0]
    link = _Frames()
    reading = [True]
    dog = Watchdog(10.0, lambda: (link, reading[0]), clock=lambda: now[0])
    assert dog.check() is None
    now[0] = 9.0
    link._last_frame_received_time = 1.0  # a heartbeat
    assert dog.check() is None
    reading[0] = False  # backpressure for a long time: not silence
    now[0] = 100.0
    assert dog.check() is None
    reading[0] = True
    now[0] = 109.0
    assert dog.check() is None
    now[0] = 110.5
    assert dog.check() == pytest.approx(10.5)
    other = _Frames()  # a new connection starts afresh
    link = other
    assert dog.check() is None


async def test_bounded_gives_up_without_waiting_for_the_work() -> None:
    cleaned = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    with pytest.raises(TransportError, match=r"properties: no answer within 0\.1 s") as caught:
        await bounded(hangs(), 0.1, "properties")
    assert caught.value.retriable
    await asyncio.wait_for(cleaned.wait(), 5)


# -- against the emulator -----------------------------------------------------------------------------------------


async def test_a_quiet_partition_is_not_a_dead_path(
    emulator_factory: EmulatorFactory,  # noqa: F811
    receive_path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The emulator heartbeats at half the advertised idle timeout: pulls on an idle partition just come back empty."""
    emulator = emulator_factory(hubs={"quiet": 1})
    async with EventHub.from_connection_string(emulator.connection_string("quiet"), idle_timeout=IDLE) as hub:
        await hub.send([b"first"], partition_id="0")
        async with hub.receiver("0", start=Position.earliest()) as receiver:
            assert [e.body for e in await receiver.receive_batch(10, max_wait=10)] == [b"first"]
            for _ in range(5):  # 5 idle timeouts without a single event
                assert await receiver.receive_batch(10, max_wait=IDLE) == []
            await hub.send([b"second"], partition_id="0")
            assert [e.body for e in await receiver.receive_batch(10, max_wait=10)] == [b"second"]
    assert _stall_warnings(caplog) == []


async def test_backpressure_is_not_silence(
    emulator_factory: EmulatorFactory,  # noqa: F811
    receive_path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A receiver not pulled for many idle timeouts stops reading its link; that pause is not a dead path.

    The emulator's own idle timeout is shorter than the pause: it keeps the connection only because the paused
    connection still sends it heartbeats.
    """
    emulator = emulator_factory(hubs={"slow": 1}, idle_timeout=1.5)
    async with EventHub.from_connection_string(emulator.connection_string("slow"), idle_timeout=IDLE) as hub:
        await hub.send([f"e{i}".encode() for i in range(200)], partition_id="0")
        async with hub.receiver("0", start=Position.earliest(), prefetch=10) as receiver:
            got = [e.sequence_number for e in await receiver.receive_batch(1, max_wait=10)]
            await asyncio.sleep(5 * IDLE)  # the buffer is full: the link is not read
            while len(got) < 200:
                got += [e.sequence_number for e in await receiver.receive_batch(50, max_wait=10)]
            assert got == list(range(200))
    assert _stall_warnings(caplog) == []


async def test_the_watchdogs_of_a_loop_share_one_timer_and_only_the_dead_path_is_given_up() -> None:
    """200 watched links look every 0.05 s on one task (not 200 timers); the one whose frames stop is found dead."""
    links = [_Frames() for _ in range(200)]
    for link in links:
        link._last_frame_received_time = 0.0
    dogs = [Watchdog(0.2, lambda link=link: (link, True)) for link in links]  # type: ignore[misc]
    tasks_before = len(asyncio.all_tasks())
    watching = [asyncio.ensure_future(dog.watch()) for dog in dogs]
    alive = True

    async def heartbeats() -> None:
        beat = 0.0
        while alive:
            beat += 1
            for link in links[1:]:  # every link but the first hears from the service
                link._last_frame_received_time = beat
            await asyncio.sleep(0.02)

    beating = asyncio.ensure_future(heartbeats())
    await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) == tasks_before + len(watching) + 1 + 1  # the watchers, heartbeats, one clock
    timers = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    assert len([t for t in timers if not t.cancelled()]) <= 2  # the clock's sleep and the heartbeats' (not 200)
    silent = await asyncio.wait_for(watching[0], 10)
    assert silent > 0.2
    assert not any(task.done() for task in watching[1:])  # the others are alive
    alive = False
    await beating
    for task in watching[1:]:
        task.cancel()
    await asyncio.gather(*watching[1:], return_exceptions=True)
    await asyncio.sleep(0.1)
    assert len(asyncio.all_tasks()) == tasks_before  # the clock's task ended with its last watchdog
