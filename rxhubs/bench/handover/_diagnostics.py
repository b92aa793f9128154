"""What a bench worker logs for development, by environment variable (none of it changes a figure).

``RXHUBS_BENCH_BALANCING_LOG=1``: the balancing loop's log (rounds, losses, releases), with wall times;
``RXHUBS_BENCH_GC_LOG=1``: the cyclic collector's pauses every 10 s; ``RXHUBS_BENCH_DEBUG=1``: the consumer's whole
log. All go to stderr, which ``RXHUBS_BENCH_WORKER_LOGS`` keeps per worker.
"""

from __future__ import annotations

import logging
import os
import time

__all__ = ["diagnostics"]

_FORMAT = "%(created).3f %(name)s %(message)s"


def diagnostics() -> None:
    """Turn on the logs the environment asks for."""
    if os.environ.get("RXHUBS_BENCH_BALANCING_LOG"):  # the balancing loop's log (rounds, losses), with wall times
        logging.basicConfig(level=logging.WARNING, format=_FORMAT)
        logging.getLogger("rxhubs.balancing").setLevel(logging.DEBUG)
    if os.environ.get("RXHUBS_BENCH_GC_LOG"):  # the cyclic collector's pauses, every 10 s, on stderr
        logging.basicConfig(level=logging.WARNING, format=_FORMAT)
        _log_collections()
    if os.environ.get("RXHUBS_BENCH_DEBUG"):  # the consumer's log, with wall times, on stderr
        logging.basicConfig(level=logging.DEBUG, format=_FORMAT)
        for noisy in ("azure", "asyncio", "uamqp"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _log_collections() -> None:
    """Log the cyclic collector's pauses every 10 s: collections and wall seconds per generation, objects tracked.

    Example:
        >>> import gc
        >>> _log_collections(); added = gc.callbacks.pop(); callable(added)
        True
    """
    import gc

    log = logging.getLogger("rxhubs.bench.gc")
    spent = [[0, 0.0] for _ in range(3)]
    began: list[float] = [0.0]
    shown = [time.monotonic()]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        entry = spent[info["generation"]]
        entry[0] += 1
        entry[1] += time.perf_counter() - began[0]
        if time.monotonic() - shown[0] >= 10:
            log.warning("gc: %s; %d objects tracked", "  ".join(f"gen{g} {n} x {s:.3f} s" for g, (n, s) in
                                                             enumerate(spent)), len(gc.get_objects()))
            shown[0] = time.monotonic()
            for item in spent:
                item[0], item[1] = 0, 0.0

    gc.callbacks.append(timed)
