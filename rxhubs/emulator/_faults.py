"""Fault control: make a running emulator misbehave the way the service does (busy, forced close, steal...).

:class:`EmulatorFaults` is what ``emulator.faults`` returns. Every method is plain (not async) and may be
called on the emulator's event loop or from any other thread: a call from elsewhere runs on the emulator's
loop and waits for it (briefly: none of them does I/O beyond queueing frames).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from rxhubs.emulator import _frames as fr
from rxhubs.emulator._fault_state import BUSY, BUSY_KINDS, BUSY_TEXT, FaultState, LinkLog
from rxhubs.emulator._links import ConsumerLink
from rxhubs.errors import ConfigurationError, EmulatorError

if TYPE_CHECKING:
    from rxhubs.emulator._connection import Connection
    from rxhubs.emulator._hub import Hub
    from rxhubs.emulator._server import Server

__all__ = ["EmulatorFaults"]

_LOG = logging.getLogger("rxhubs.emulator")
_T = TypeVar("_T")
_CALL_TIMEOUT = 10.0
MAX_BUSY_SECONDS = 24 * 3600.0


class _Host:
    """What the faults need from their emulator: its server and loop while it runs, and its hub counts."""

    server: Server | None
    loop: asyncio.AbstractEventLoop | None

    def __init__(self, hubs: dict[str, int]) -> None:
        self.server = None
        self.loop = None
        self.hubs = hubs


class EmulatorFaults:
    """Inject the service's faults into a running emulator: server busy, forced closes, stolen links, new partitions.

    Get it as ``emulator.faults`` (:class:`~rxhubs.emulator.Emulator` or
    :class:`~rxhubs.emulator.BackgroundEmulator`). Each method is synchronous and safe from the emulator's
    event loop and from other threads. Timed faults (:meth:`server_busy`) end by themselves or with
    :meth:`clear`; the others act once, at once. What the real service does in each case is in
    ``docs/emulator.md`` ("Fault control").

    Example:
        >>> from rxhubs.emulator import BackgroundEmulator
        >>> with BackgroundEmulator({"telemetry": 2}) as emulator:
        ...     emulator.faults.server_busy(5.0, on=["attach"])
        ...     busy = emulator.faults.active
        ...     emulator.faults.add_partitions("telemetry", 4)
        ...     emulator.faults.clear()
        ...     busy, emulator.faults.active, emulator.emulator.hubs
        (['server-busy on attach for every hub (5.0 s left)'], [], {'telemetry': 4})
    """

    def __init__(self, host: _Host, state: FaultState, link_log: LinkLog) -> None:
        self._host = host
        self._state = state
        self._log = link_log

    def __repr__(self) -> str:
        return f"EmulatorFaults(active={len(self._state.describe())})"

    # -- running on the emulator's loop ------------------------------------------------------------------------
    def _call(self, action: Callable[[Server], _T]) -> _T:
        server, loop = self._host.server, self._host.loop
        if server is None or loop is None:
            raise EmulatorError("the emulator is not running: start it before injecting faults")
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            return action(server)
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(action(server))
            except BaseException as exc:  # handed to the calling thread
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(_CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise EmulatorError(f"the emulator's loop did not run the fault within {_CALL_TIMEOUT:.0f} s") from None

    # -- timed faults ----------------------------------------------------------------------------------------------
    def server_busy(self, seconds: float, on: Iterable[str] | str = BUSY_KINDS, hub: str | None = None) -> None:
        """Answer as an overloaded service for ``seconds``: ``com.microsoft:server-busy`` (the SDK backs off 4 s).

        Args:
            seconds: How long (the window ends by itself, or with :meth:`clear`).
            on: What is refused (a list, or one comma-separated string):
                ``"attach"``: producer and consumer links to the hub are refused with
                ``com.microsoft:server-busy`` (consumer links as the emulator's other refusals, see
                ``refuse_consumers_at_attach``); ``"flow"``: consumer links attached when the window begins
                are detached with ``com.microsoft:server-busy``, and no link gets deliveries until it ends
                (credit is not served); ``"management"``: property reads are answered with status 503 and
                that condition.
            hub: Only this event hub (default: every hub).

        Raises:
            ConfigurationError: ``seconds`` not positive, an unknown kind in ``on``, an unknown hub.
            EmulatorError: The emulator is not running.
        """
        number = not isinstance(seconds, bool) and isinstance(seconds, int | float) and math.isfinite(seconds)
        if not number or not 0 < seconds <= MAX_BUSY_SECONDS:
            raise ConfigurationError(f"seconds must be a number in (0, {MAX_BUSY_SECONDS:.0f}], got {seconds!r}")
        kinds = parse_kinds(on)

        def act(server: Server) -> None:
            name = _hub(server, hub).name if hub is not None else None
            self._state.add_busy(float(seconds), kinds, name)
            _LOG.warning("fault: server busy on %s for %.1f s (%s)", ", ".join(sorted(kinds)), seconds,
                         name or "every hub")
            if "flow" in kinds:
                for link in _consumer_links(server, name):
                    link.partition.remove_reader(link.consumer_group, link)  # evict() leaves that to its caller
                    link.evict(BUSY, BUSY_TEXT)

        self._call(act)

    def clear(self) -> None:
        """End every timed fault now (server-busy windows). Safe when the emulator is stopped."""
        if self._host.loop is None:
            self._state.clear()
        else:
            self._call(lambda _: self._state.clear())

    @property
    def active(self) -> list[str]:
        """The timed faults in force, one line each (for reports); empty when none is."""
        if self._host.loop is None:
            return self._state.describe()
        return self._call(lambda _: self._state.describe())

    # -- faults that act once ------------------------------------------------------------------------------------
    def force_close(self, hub: str | None = None) -> int:
        """Close client connections with ``amqp:connection:forced``, as the service does when it moves or restarts.

        Args:
            hub: Only the connections with a producer or consumer link to this hub (default: every connection).

        Returns:
            How many connections were closed.

        Raises:
            ConfigurationError: An unknown hub.
            EmulatorError: The emulator is not running.
        """

        def act(server: Server) -> int:
            name = _hub(server, hub).name if hub is not None else None
            closing = [c for c in list(server.connections) if not c.closing and (name is None or _uses(c, name))]
            for conn in closing:
                conn.force_close(fr.CONNECTION_FORCED, "The connection was closed by the emulator's fault control "
                                 "(as the service does when it moves or restarts the entity).")
            _LOG.warning("fault: closed %d connection(s) with %s", len(closing), fr.CONNECTION_FORCED)
            return len(closing)

        return self._call(act)

    def steal(self, hub: str, partition_id: str, consumer_group: str = "$Default") -> int:
        """Detach a partition's receivers with ``amqp:link:stolen``, as a receiver with a higher owner level does.

        No new reader takes their place: the partition is free for whoever attaches next.

        Returns:
            How many receiver links were detached.

        Raises:
            ConfigurationError: An unknown hub or partition.
            EmulatorError: The emulator is not running.
        """

        def act(server: Server) -> int:
            found = _hub(server, hub)
            partition = found.partitions.get(str(partition_id))
            if partition is None:
                raise ConfigurationError(f"event hub {found.name!r} has no partition {partition_id!r} "
                                         f"(partitions 0-{found.partition_count - 1})")
            readers = partition.readers.get(str(consumer_group).casefold(), [])
            victims = list(readers)
            top = max((r.epoch for r in victims if r.epoch is not None), default=-1)
            where = f"partition '{partition.partition_id}' of '{found.name}' in consumer group '{consumer_group}'"
            for reader in victims:
                readers.remove(reader)
                reader.evict(fr.LINK_STOLEN, f"New receiver with owner level {top + 1} was opened on {where}; this "
                             f"receiver (owner level {reader.epoch}) is disconnected. (rxhubs emulator fault control)")
            _LOG.warning("fault: stole %d link(s) of %s", len(victims), where)
            return len(victims)

        return self._call(act)

    def add_partitions(self, hub: str, partition_count: int) -> None:
        """Grow a live event hub to ``partition_count`` partitions (the service's premium and dedicated tiers can).

        The new partitions are readable and writable at once and in the hub's properties; existing links are
        left alone (see docs/emulator.md). With a data directory the count is kept: a restarted emulator has
        them too. Sends to the hub (round robin, partition keys) spread over every partition from now on.

        Raises:
            ConfigurationError: An unknown hub, or a count below the current one (hubs never shrink) or above 1024.
            EmulatorError: The emulator is not running, or the count could not be written to its data directory.
        """
        count = partition_count
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1024:
            raise ConfigurationError(f"partition_count must be a whole number from 1 to 1024, got {partition_count!r}")

        def act(server: Server) -> None:
            found = _hub(server, hub)
            if partition_count < found.partition_count:
                raise ConfigurationError(f"event hub {found.name!r} has {found.partition_count} partitions; "
                                         f"partitions can be added, never removed (asked for {partition_count})")
            try:
                found.grow(partition_count)
            except OSError as exc:
                raise EmulatorError(f"cannot record the partition count of {found.name!r}: "
                                    f"{exc.strerror or exc}") from exc
            self._host.hubs[found.name] = found.partition_count
            _LOG.warning("fault: event hub %s now has %d partitions", found.name, partition_count)

        self._call(act)

    def promote(self) -> dict[str, int]:
        """A geo-replication promotion: a new replication segment, string offsets, every connection closed.

        Sequence numbers carry over; every event is delivered with its offset in the new segment
        (``<segment>:<partition>:<byte offset>``); a receiver positioned by an offset of an earlier segment (a
        plain number included) is refused with ``com.microsoft:georeplication:invalid-offset``; the hub's
        ``georeplication_factor`` becomes 2. See :mod:`rxhubs.emulator._geo` and docs/emulator.md.

        Returns:
            ``{"segment": N, "closed": connections closed}``.

        Raises:
            EmulatorError: The emulator is not running, or its data directory could not keep the segment.
        """
        from rxhubs.emulator._geo import promote

        def act(server: Server) -> dict[str, int]:
            try:
                answer = promote(server)
            except OSError as exc:
                raise EmulatorError(f"cannot record the replication segment: {exc.strerror or exc}") from exc
            _LOG.warning("fault: geo-replication promotion to segment %d; closed %d connection(s)",
                         answer["segment"], answer["closed"])
            return answer

        return self._call(act)

    # -- reports ---------------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Active faults, connections and consumer links now, and the link log's totals (what ``fault status`` prints).

        Returns:
            ``{"active": [...], "connections": N, "consumer_links": {hub: N}, "link_log": {"attach": N,
            "detach": N, "refuse": N, "conditions": {condition: N}}}``.
        """

        def act(server: Server) -> dict[str, Any]:
            links = Counter(link.partition.hub for link in _consumer_links(server, None))
            return {"active": self._state.describe(), "connections": len(server.connections),
                    "replication_segment": server.replication.segment,
                    "consumer_links": {name: links.get(name, 0) for name in server.hubs}}

        report = self._call(act)
        records = self._log.records()
        events = Counter(r.event for r in records)
        report["link_log"] = {"attach": events.get("attach", 0), "detach": events.get("detach", 0),
                              "refuse": events.get("refuse", 0),
                              "conditions": dict(Counter(r.condition for r in records if r.condition))}
        return report


def parse_kinds(on: Iterable[str] | str) -> frozenset[str]:
    """``"attach,flow"`` or ``["attach", "flow"]`` -> the kinds of a server-busy window.

    Raises:
        ConfigurationError: No kind, or one that is not attach, flow or management.

    Example:
        >>> sorted(parse_kinds("attach, flow"))
        ['attach', 'flow']
    """
    items = on.split(",") if isinstance(on, str) else list(on)
    kinds = frozenset(str(k).strip().lower() for k in items if str(k).strip())
    unknown = sorted(kinds - set(BUSY_KINDS))
    if unknown or not kinds:
        raise ConfigurationError(f"server busy 'on' takes some of {', '.join(BUSY_KINDS)}; got {list(items)!r}")
    return kinds


def _hub(server: Server, name: str) -> Hub:
    hub = server.hub(name) if isinstance(name, str) else None
    if hub is None:
        raise ConfigurationError(f"unknown event hub {name!r}; the emulator serves {sorted(server.hubs)}")
    return hub


def _consumer_links(server: Server, hub: str | None) -> list[ConsumerLink]:
    return [link for conn in list(server.connections) for session in list(conn.sessions.values())
            for link in list(session.links.values())
            if isinstance(link, ConsumerLink) and not link.detach_sent and (hub is None or link.partition.hub == hub)]


def _uses(conn: Connection, hub: str) -> bool:
    for session in conn.sessions.values():
        for link in session.links.values():
            if isinstance(link, ConsumerLink) and link.partition.hub == hub:
                return True
            target = getattr(link, "hub", None)
            if target is not None and getattr(target, "name", None) == hub:
                return True
    return False
