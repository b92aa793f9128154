"""Liveness: a silent path is noticed, said out loud and left, instead of being waited on forever.

A path can go silent with no FIN and no RST (a dead NAT entry, a blackholing proxy); TCP does not notice for
many minutes, and azure-eventhub does not either by default. So every receiver's connection asks the service
for heartbeats (it advertises half the ``idle_timeout`` in its AMQP Open, as the AMQP spec advises, so the
service sends an empty frame at least every quarter to half of it), and a :class:`Watchdog` looks at the
connection's last received frame every second: if the connection is being read and nothing at all (not even a
heartbeat) arrived for ``idle_timeout`` seconds, the path is dead. The receive is then cut off with a retriable
:class:`~rxhubs.errors.TransportError`, logged once at WARNING on ``rxhubs.liveness`` and counted
(:mod:`rxhubs._telemetry`); a partition stream reopens the receiver on a new connection from after the last
event it delivered.

Time spent *not* reading does not count: while the receiver's buffer is full (backpressure) the link is not
read, heartbeats wait in the socket, and the clock restarts when reading resumes. azure-eventhub's own check
("No frame received for the idle timeout", pyamqp) counts that time and would drop a healthy connection after a
long pause, so it is switched off once the Open carrying the idle timeout has been sent: rxhubs decides.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rxhubs import _telemetry
from rxhubs.errors import ConfigurationError, TransportError
from rxhubs.transport._watch_clock import WatchClock

if TYPE_CHECKING:
    from rxhubs._models import PartitionContext

__all__ = [
    "LinkWatch", "Liveness", "Watchdog", "already_warned", "bounded", "own_the_decision", "sdk_link", "stall_counts",
    "stall_error", "watched",
]

_log = logging.getLogger("rxhubs.liveness")
T = TypeVar("T")

DEFAULT_IDLE_TIMEOUT = 10.0
DEFAULT_OPEN_TIMEOUT = 30.0
DEFAULT_MANAGEMENT_TIMEOUT = 30.0
#: Longest gap between two looks of a watchdog (a quarter of the idle timeout when that is shorter).
_LOOK_EVERY = 1.0
#: pyamqp connection states in which the Open (carrying the idle timeout) has been sent.
_OPEN_SENT = frozenset({"OPEN_PIPE", "OPEN_SENT", "OPENED"})
_WARNED = "_rxhubs_warned"


def _seconds(name: str, value: object, *, none_ok: bool = False) -> float | None:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        allowed = " or None" if none_ok else ""
        raise ConfigurationError(f"{name} must be a number of seconds > 0{allowed}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Liveness:
    """How long an :class:`~rxhubs.EventHub` waits on a silent service before giving the path up.

    Attributes:
        idle_timeout: Seconds a receiving connection may stay silent (not even a heartbeat) while read before
            it is presumed dead; half of it is advertised to the service, which heartbeats accordingly. None
            turns heartbeats and the watchdog off (a silent path then stalls until TCP gives up).
        open_timeout: Seconds opening a receiver's link (connection, authentication, attach) may take.
        management_timeout: Seconds one attempt of a management call (properties, partition ids) may take.

    Example:
        >>> Liveness.parse({"idle_timeout": 4, "retry_total": 1}).idle_timeout
        4.0
        >>> Liveness.parse({"open_timeout": 0})
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: open_timeout must be a number of seconds > 0, got 0
    """

    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    management_timeout: float = DEFAULT_MANAGEMENT_TIMEOUT

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Liveness:
        """The settings in ``options`` (other keys are ignored), checked; defaults for those not given."""
        idle = _seconds("idle_timeout", options.get("idle_timeout", DEFAULT_IDLE_TIMEOUT), none_ok=True)
        opening = _seconds("open_timeout", options.get("open_timeout", DEFAULT_OPEN_TIMEOUT))
        management = _seconds("management_timeout", options.get("management_timeout", DEFAULT_MANAGEMENT_TIMEOUT))
        assert opening is not None and management is not None
        return cls(idle, opening, management)

    @property
    def advertised(self) -> float | None:
        """The idle timeout put in the AMQP Open: half the real one, so heartbeats come with room to spare."""
        return None if self.idle_timeout is None else self.idle_timeout / 2


def _last_frame(connection: Any) -> Any:
    """What changes whenever bytes arrive: the last whole frame's time, and the bytes of a frame still arriving.

    A frame larger than what a thin pipe carries in one idle timeout arrives for longer than that; its bytes
    gathering in the socket reader's buffer are a live path too (else every reconnection would start the same
    frame over, for ever).
    """
    reader = getattr(getattr(connection, "_transport", None), "reader", None)
    pending = getattr(reader, "_buffer", None)
    return getattr(connection, "_last_frame_received_time", None), len(pending) if pending is not None else None


def own_the_decision(connection: Any) -> None:
    """Turn pyamqp's own idle check off once the Open is out (it counts backpressure as silence)."""
    if getattr(connection, "_idle_timeout", None) and getattr(connection.state, "name", "") in _OPEN_SENT:
        connection._idle_timeout = None


class Watchdog:
    """Decides when a connection that is being read has been silent for too long.

    ``probe()`` returns ``(connection, reading)``: the pyamqp connection now in use (None before it exists) and
    whether it is being read. Silence is counted from the later of the last frame seen and the last moment
    the connection was not read, so backpressure never counts; a new connection starts afresh.

    Example:
        >>> now = [0.0]
        >>> class Connection: _last_frame_received_time = None; state = None
        >>> link = Connection()
        >>> dog = Watchdog(10.0, lambda: (link, True), clock=lambda: now[0])
        >>> dog.check(), [now.__setitem__(0, 10.5), dog.check()][1]
        (None, 10.5)
    """

    def __init__(
        self, idle_timeout: float, probe: Callable[[], tuple[Any, bool]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_timeout = idle_timeout
        self._probe = probe
        self._clock = clock
        self._connection: Any = None
        self._stamp: Any = None
        self._heard = clock()
        self.paused: Any = None  # the connection, while it is not read (it still owes the service heartbeats)

    def check(self) -> float | None:
        """Seconds of silence while read, once past the idle timeout; None while the path is alive."""
        connection, reading = self._probe()
        now = self._clock()
        self.paused = None
        if connection is not None:
            own_the_decision(connection)  # from the first look: the handshake is watched here too
        if connection is not self._connection:
            self._connection, self._stamp, self._heard = connection, _last_frame(connection), now
            return None
        if connection is None:
            self._heard = now
            return None
        stamp = _last_frame(connection)
        if stamp != self._stamp or not reading:
            self._stamp, self._heard = stamp, now
            if not reading:
                self.paused = connection
            return None
        silent = now - self._heard
        return silent if silent > self.idle_timeout else None

    def excuse(self) -> None:
        """Count nothing up to now as silence (the event loop was held up, so nothing could be read)."""
        self._heard = self._clock()

    async def watch(self) -> float:
        """Return the seconds of silence once the path is dead (looks every second, or more often).

        A look that comes late (the event loop was busy: a synchronous handler, a slow machine) excuses the time
        before it, and a look that finds the path dead looks once more a moment later, after the reader had a
        chance to take what the socket holds: a busy loop that did not read is not a silent service. The looks
        are taken by one timer for every watchdog of the loop (:mod:`rxhubs.transport._watch_clock`).
        """
        return await WatchClock.of(min(_LOOK_EVERY, self.idle_timeout / 4), _heartbeat).wait(self)


async def _heartbeat(connection: Any) -> None:
    """Send the service the empty frame its idle timeout asks for, if due, without reading (backpressure)."""
    try:
        await connection.listen(wait=False, batch=0)
    except Exception as exc:  # a broken connection shows up where it is read
        _log.debug("heartbeat on a paused connection failed: %r", exc)


class LinkWatch:
    """The direct receive path's link as a watchdog sees it: its SDK receive client and whether it is read."""

    __slots__ = ("handler", "reading")

    def __init__(self) -> None:
        self.handler: Any = None
        self.reading = True

    def probe(self) -> tuple[Any, bool]:
        return getattr(self.handler, "_connection", None), self.reading


def sdk_link(client: Any, consumer_group: str, partition_id: str, batch: int) -> tuple[Any, bool]:
    """The public receive path's connection as a watchdog sees it (the SDK reads while it buffers <= ``batch``)."""
    try:
        consumer = client._event_processors[(consumer_group, partition_id)]._consumers[partition_id]
    except (AttributeError, KeyError, TypeError):
        return None, True
    buffered = getattr(consumer, "_message_buffer", ())
    return getattr(getattr(consumer, "_handler", None), "_connection", None), len(buffered) <= batch


_stalls: Counter[tuple[str, str, str]] = Counter()  # (hub, group, partition) -> stalls noticed
_stalls_lock = threading.Lock()


def stall_error(context: PartitionContext, silent: float, idle_timeout: float) -> TransportError:
    """The retriable error of a dead path: logged once at WARNING, counted, and marked as already said."""
    c = context
    error = TransportError(
        f"receive from {c.eventhub_name}/{c.consumer_group}/{c.partition_id}: no frame from the service for "
        f"{silent:.1f} s (idle timeout {idle_timeout:g} s); the connection is presumed dead"
    )
    _log.warning("partition %s of %s/%s: no frame from the service for %.1f s (idle timeout %g s); reconnecting",
                 c.partition_id, c.eventhub_name, c.consumer_group, silent, idle_timeout)
    setattr(error, _WARNED, True)
    with _stalls_lock:
        _stalls[(c.eventhub_name.lower(), c.consumer_group.lower(), c.partition_id)] += 1
    _telemetry.hooks.stalled(context, silent)
    return error


def stall_counts(eventhub_name: str, consumer_group: str) -> dict[str, int]:
    """Partition id -> dead paths noticed in this process for that hub and group (the lag endpoint's stall series).

    Example:
        >>> stall_counts("no-such-hub", "$Default")
        {}
    """
    key = (eventhub_name.lower(), consumer_group.lower())
    with _stalls_lock:
        return {pid: n for (hub, group, pid), n in _stalls.items() if (hub, group) == key}


def already_warned(error: BaseException) -> bool:
    """Whether ``error`` was already logged at WARNING where it was detected (a stall)."""
    return bool(getattr(error, _WARNED, False))


def _settle(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure of abandoned work is not "never retrieved"


async def watched(work: Coroutine[Any, Any, T], watchdog: Watchdog, stalled: Callable[[float], Exception]) -> T:
    """Await ``work`` unless ``watchdog`` finds the path dead first: then cancel it and raise ``stalled(silent)``.

    ``work`` runs in the caller's task (its clean-up, closing the link, is the caller's, as without a watchdog:
    a caller that closes the receiver waits for it); the watchdog runs beside it and cancels that task once the
    path is dead. A cancel from elsewhere at the same moment stays a cancel.
    """
    current = asyncio.current_task()
    assert current is not None
    silence: list[float] = []

    async def watch() -> None:
        silence.append(await watchdog.watch())
        current.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if silence and current.uncancel() == 0:  # our own cancel, and no one else's
            raise stalled(silence[0]) from None
        raise
    finally:
        watcher.cancel()


async def bounded(work: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
    """Await ``work`` for at most ``timeout`` seconds, else raise a retriable ``TransportError``.

    The work runs as its own task and is cancelled on timeout without being waited for: its clean-up (closing a
    connection that went silent) must not hold the caller. A management call the SDK would leave half-open if
    cancelled runs on under :class:`~rxhubs.transport._orphans.Orphans` (the hub wraps it): nothing here collects
    garbage, which would pause every partition of the process for as long as a full collection of its heap takes.

    Example:
        >>> asyncio.run(bounded(asyncio.sleep(0, "done"), 1.0, "nothing"))
        'done'
    """
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_settle)
        raise
    if done:
        return task.result()
    task.cancel()
    task.add_done_callback(_settle)
    raise TransportError(f"{what}: no answer within {timeout:g} s; the connection is presumed dead")
