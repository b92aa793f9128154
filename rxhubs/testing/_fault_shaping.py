"""Faults that shape what a :class:`~rxhubs.testing.FaultProxy` forwards: latency, bandwidth, slices, a cut.

Each applies per chunk, per direction, to open and new connections until :meth:`FaultProxy.heal
<rxhubs.testing.FaultProxy.heal>`; the proxy's connections read them from its ``Faults`` (``_fault_link``).
"""

from __future__ import annotations

from typing import Any

from rxhubs.testing._fault_args import directions, non_negative, positive_int

__all__ = ["ShapingFaults"]


class ShapingFaults:
    """The shaping faults of :class:`~rxhubs.testing.FaultProxy` (a mixin: the proxy's state is its own)."""

    _faults: Any
    _change: Any
    _generation: int

    def latency(self, seconds: float, jitter: float = 0.0, direction: str = "both") -> None:
        """Delay each chunk by ``seconds`` ± a seeded uniform ``jitter``, order kept.

        Args:
            seconds: The delay, >= 0.
            jitter: The spread, >= 0 (a delay never goes below 0 or overtakes the previous chunk's).
            direction: ``"both"``, ``"upstream"`` or ``"downstream"``.

        Example:
            >>> from rxhubs.testing import FaultProxy
            >>> FaultProxy("127.0.0.1", 5672).latency(0.2, jitter=0.05)
        """
        value = (non_negative("seconds", seconds), non_negative("jitter", jitter))
        chosen = directions(direction)
        self._change(lambda: setattr(self._faults, "latency", dict.fromkeys(chosen, value)))

    def bandwidth(self, bytes_per_second: int, direction: str = "both") -> None:
        """Throttle to ``bytes_per_second`` (a token bucket: N bytes take at least N / rate seconds).

        Args:
            bytes_per_second: The rate, an integer >= 1.
            direction: ``"both"``, ``"upstream"`` or ``"downstream"``.

        Example:
            >>> from rxhubs.testing import FaultProxy
            >>> FaultProxy("127.0.0.1", 5672).bandwidth(10_000, direction="downstream")
        """
        rate = positive_int("bytes_per_second", bytes_per_second)
        chosen = directions(direction)
        self._change(lambda: setattr(self._faults, "bandwidth", dict.fromkeys(chosen, rate)))

    def slice(self, min_bytes: int = 1, max_bytes: int = 7, delay: float = 0.0, direction: str = "both") -> None:
        """Forward in tiny writes of seeded sizes in ``[min_bytes, max_bytes]``, ``delay`` seconds apart.

        Args:
            min_bytes: The smallest write, >= 1.
            max_bytes: The largest write, >= ``min_bytes``.
            delay: Seconds between the writes of one chunk, >= 0.
            direction: ``"both"``, ``"upstream"`` or ``"downstream"``.

        Example:
            >>> from rxhubs.testing import FaultProxy
            >>> FaultProxy("127.0.0.1", 5672).slice(1, 3, delay=0.001)
        """
        low = positive_int("min_bytes", min_bytes)
        high = positive_int("max_bytes", max_bytes, low)
        value = (low, high, non_negative("delay", delay))
        chosen = directions(direction)
        self._change(lambda: setattr(self._faults, "slices", dict.fromkeys(chosen, value)))

    def cut_after(self, n_bytes: int, direction: str = "both") -> None:
        """After ``n_bytes`` more bytes in ``direction`` on a connection, RST both its sides (mid-frame).

        Counted per connection from this call (open ones) or from their accept (new ones).

        Args:
            n_bytes: Bytes still forwarded, >= 0.
            direction: ``"both"``, ``"upstream"`` or ``"downstream"`` (``"both"``: each direction counts its own).

        Example:
            >>> from rxhubs.testing import FaultProxy
            >>> FaultProxy("127.0.0.1", 5672).cut_after(100, direction="downstream")
        """
        size = positive_int("n_bytes", n_bytes, 0)
        chosen = directions(direction)

        def change() -> None:
            self._generation += 1
            self._faults.cut = dict.fromkeys(chosen, (size, self._generation))
        self._change(change)
