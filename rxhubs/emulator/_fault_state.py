"""What the server consults for injected faults (timed server-busy windows) and the consumer link log.

:class:`FaultState` is read and changed on the emulator's event loop only (the public
:class:`~rxhubs.emulator.EmulatorFaults` hops onto it); :class:`LinkLog` is appended to on the loop and may be
copied from any thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

__all__ = ["BUSY", "BUSY_TEXT", "BUSY_KINDS", "FaultState", "LinkLog", "LinkRecord"]

BUSY = "com.microsoft:server-busy"
#: The service's wording for throttling (error code 50002), with its advice.
BUSY_TEXT = ("The request was terminated because the entity is being throttled. Error code : 50002. "
             "Sub error : 102. Please wait 4 seconds and try again. (rxhubs emulator fault control)")
BUSY_KINDS = ("attach", "flow", "management")
LOG_SIZE = 100_000


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """One consumer link event of the emulator's :attr:`~rxhubs.emulator.Emulator.link_log`.

    Attributes:
        time: Wall-clock time (``time.time()``) of the event.
        connection: The id of the client connection (1, 2, ... per emulator process).
        hub: The event hub, as the emulator names it.
        consumer_group: The consumer group, as the client wrote it.
        partition_id: The partition.
        owner_level: The link's owner level (epoch), or None.
        event: ``"attach"``; ``"detach"`` (either side, or its connection ended); ``"refuse"`` (the link was
            refused: server busy, a lower owner level, too many readers; it was never attached).
        condition: The AMQP error condition of a detach or refusal (``amqp:link:stolen``,
            ``com.microsoft:server-busy``, ``amqp:connection:forced``...), None for a plain detach.

    Example:
        >>> LinkRecord(0.0, 1, "telemetry", "$Default", "0", 3, "detach", "amqp:link:stolen").condition
        'amqp:link:stolen'
    """

    time: float
    connection: int
    hub: str
    consumer_group: str
    partition_id: str
    owner_level: int | None
    event: str
    condition: str | None


class LinkLog:
    """The last ``size`` consumer link records; appended on the loop, copied from any thread."""

    def __init__(self, size: int = LOG_SIZE) -> None:
        self._records: deque[LinkRecord] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, connection: int, hub: str, consumer_group: str, partition_id: str, owner_level: int | None,
            event: str, condition: str | None = None) -> None:
        record = LinkRecord(time.time(), connection, hub, consumer_group, partition_id, owner_level, event, condition)
        with self._lock:
            self._records.append(record)

    def records(self) -> list[LinkRecord]:
        with self._lock:
            return list(self._records)


@dataclass(frozen=True, slots=True)
class _Busy:
    kinds: frozenset[str]
    hub: str | None  # case-folded; None: every hub
    label: str
    until: float  # time.monotonic()


class FaultState:
    """The timed faults in force (server-busy windows), by kind and hub."""

    def __init__(self) -> None:
        self._busy: list[_Busy] = []

    def add_busy(self, seconds: float, kinds: frozenset[str], hub: str | None) -> None:
        label = "every hub" if hub is None else f"hub {hub!r}"
        self._busy.append(_Busy(kinds, hub.casefold() if hub is not None else None, label,
                                time.monotonic() + seconds))

    def busy(self, kind: str, hub: str) -> bool:
        """Whether ``kind`` (attach, flow, management) is refused for ``hub`` right now."""
        if not self._busy:
            return False
        now, folded = time.monotonic(), hub.casefold()
        self._busy = [b for b in self._busy if b.until > now]
        return any(kind in b.kinds and (b.hub is None or b.hub == folded) for b in self._busy)

    def clear(self) -> None:
        self._busy.clear()

    def describe(self) -> list[str]:
        """One line per fault in force, e.g. ``server-busy on attach, flow for hub 'telemetry' (4.2 s left)``."""
        now = time.monotonic()
        self._busy = [b for b in self._busy if b.until > now]
        return [f"server-busy on {', '.join(k for k in BUSY_KINDS if k in b.kinds)} for {b.label} "
                f"({b.until - now:.1f} s left)"
                for b in self._busy]
