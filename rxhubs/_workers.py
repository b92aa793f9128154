"""Every core of one machine: :func:`run_workers` runs N consumer processes of one consumer group.

Each worker is a process of its own (``multiprocessing``, spawn start method) that calls the user's pipeline
factory and runs what it returns, as :func:`rxhubs.run` would. The workers balance the partitions between
them through the checkpoint store the pipelines use, as separate machines would. The parent:

- stops all gracefully on Ctrl-C or SIGTERM (each worker flushes, checkpoints and releases its partitions;
  a second Ctrl-C cuts them off), or after ``duration`` seconds;
- starts the workers together: each announces itself (its presence record) and waits for the others before
  its first balancing round, so their first rounds split the partitions evenly instead of the first worker
  taking all of them and handing the others' share over an interval later (``rxhubs.balancing._start_gate``);
- restarts a worker that dies (exit code not 0, or killed), with the same owner id so its partitions are
  taken back at once instead of after the ownership expiry, after a growing pause (``restart``); a worker
  that keeps dying is given up on and reported;
- returns a :class:`WorkersSummary`: events per worker, restarts, exit codes.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reactivex import Observable

from rxhubs._retry import Backoff
from rxhubs._shutdown import held_signals
from rxhubs._worker_process import Running, worker_main
from rxhubs.errors import ConfigurationError

__all__ = ["WorkerContext", "WorkerReport", "WorkersSummary", "run_workers"]

_log = logging.getLogger("rxhubs.workers")

#: Restart pauses: 1 s, 2 s, 4 s ... up to 30 s; a worker is given up on after 5 restarts in a row that each
#: lasted less than a minute.
DEFAULT_RESTART = Backoff(initial=1.0, maximum=30.0, multiplier=2.0, max_retries=5)
_STABLE_AFTER = 60.0  # a worker that ran this long before dying starts its restart count afresh
_POLL = 0.2


@dataclass
class WorkerContext:
    """What a pipeline factory is told in its worker process.

    Attributes:
        index: The worker's number, from 0.
        workers: How many workers run.
        owner_id: The owner id to give ``rxhubs.consume`` (kept across restarts of this worker).
        incarnation: 0 for the first start of this worker, then 1, 2, ... for each restart.

    Example:
        >>> def pipeline(context):  # doctest: +SKIP
        ...     hub = context.closing(rxhubs.EventHub.from_connection_string(CONN))
        ...     store = SqliteCheckpointStore("checkpoints.sqlite")
        ...     return rxhubs.consume(hub, "$Default", store, owner_id=context.owner_id).pipe(
        ...         hops.process(handle), hops.checkpoint(store))
    """

    index: int
    workers: int
    owner_id: str
    incarnation: int = 0
    _resources: list[Any] = field(default_factory=list, repr=False)

    def closing(self, resource: Any) -> Any:
        """Close ``resource`` (its async or sync ``close()``) after the pipeline ends, on the pipeline's loop.

        Returns ``resource``, so a hub or store can be opened and registered in one line.
        """
        if not callable(getattr(resource, "close", None)):
            raise ConfigurationError(f"{type(resource).__name__} has no close() to call")
        self._resources.append(resource)
        return resource


@dataclass(frozen=True)
class WorkerReport:
    """One worker's account at the end of :func:`run_workers`.

    Attributes:
        index: The worker's number.
        owner_id: Its owner id.
        events: Events its pipeline emitted (the events of each :class:`~rxhubs.EventBatch` out of the
            pipeline; 1 per item for other items), over all its incarnations.
        restarts: How many times it was restarted.
        exit_code: Its last process's exit code (negative: killed by that signal).
        gave_up: True if it kept dying and was not restarted again.

    Example:
        >>> report = WorkerReport(0, "host-1f2e3d-w0", events=1200, restarts=1, exit_code=0, gave_up=False)
        >>> report.owner_id, report.events
        ('host-1f2e3d-w0', 1200)
    """

    index: int
    owner_id: str
    events: int
    restarts: int
    exit_code: int | None
    gave_up: bool


@dataclass(frozen=True)
class WorkersSummary:
    """What :func:`run_workers` returns.

    Example:
        >>> summary = WorkersSummary((WorkerReport(0, "w0", 10, 0, 0, False), WorkerReport(1, "w1", 5, 1, 0, False)))
        >>> summary.events, summary.ok
        (15, True)
        >>> print(summary)
        worker  owner  events  restarts  exit
        0       w0         10         0     0
        1       w1          5         1     0
        total              15         1
    """

    workers: tuple[WorkerReport, ...]

    @property
    def events(self) -> int:
        """Events over all workers."""
        return sum(w.events for w in self.workers)

    @property
    def ok(self) -> bool:
        """True when every worker ended with exit code 0 and none was given up on."""
        return all(w.exit_code == 0 and not w.gave_up for w in self.workers)

    def __str__(self) -> str:
        width = max([5, *(len(w.owner_id) for w in self.workers)])
        lines = [f"{'worker':<8}{'owner':<{width}}  {'events':>6}  {'restarts':>8}  {'exit':>4}"]
        for w in self.workers:
            code = "gave up" if w.gave_up else "" if w.exit_code is None else str(w.exit_code)
            lines.append(f"{w.index:<8}{w.owner_id:<{width}}  {w.events:>6}  {w.restarts:>8}  {code:>4}")
        lines.append(f"{'total':<8}{'':<{width}}  {self.events:>6}  {sum(w.restarts for w in self.workers):>8}")
        return "\n".join(lines)


class _Slot:
    """One worker across its incarnations."""

    def __init__(self, index: int, workers: int, owner_id: str, mp: Any) -> None:
        self.index = index
        self.context = WorkerContext(index, workers, owner_id)
        self.counter = mp.RawValue("q", 0)  # events, written by the worker only
        self.process: Any = None
        self.started = 0.0
        self.failures = 0  # deaths in a row
        self.restarts = 0
        self.restart_at: float | None = None
        self.exit_code: int | None = None
        self.gave_up = False
        self.reaped = False

    def start(self, mp: Any, factory: Any, running: Running, siblings: Any = None) -> None:
        self.process = mp.Process(
            target=worker_main, args=(factory, self.context, self.counter, running, siblings),
            name=f"rxhubs-worker-{self.index}", daemon=False,
        )
        with held_signals(signal.SIGTERM):  # until the worker's handler is in place (_work)
            self.process.start()
        self.reaped = False
        self.started = time.monotonic()
        self.restart_at = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def report(self) -> WorkerReport:
        return WorkerReport(self.index, self.context.owner_id, int(self.counter.value), self.restarts,
                            self.exit_code, self.gave_up)


def _check_factory(factory: Any) -> None:
    if not callable(factory):
        raise ConfigurationError("pipeline_factory must be callable: def factory(context) -> Observable")
    try:
        pickle.dumps(factory)
    except Exception as exc:
        raise ConfigurationError(
            f"pipeline_factory {getattr(factory, '__qualname__', factory)!r} cannot be sent to a worker process: "
            "give a function defined at module level (not a lambda or a nested function), or a "
            f"functools.partial of one with picklable arguments ({type(exc).__name__})"
        ) from None


def run_workers(
    pipeline_factory: Callable[[WorkerContext], Observable[Any]],
    workers: int | None = None,
    *,
    owner_prefix: str | None = None,
    duration: float | None = None,
    grace: float = 30.0,
    restart: Backoff = DEFAULT_RESTART,
    lag: Any = None,
    gc_thresholds: tuple[int, int, int] | None = None,
) -> WorkersSummary:
    """Run ``workers`` consumer processes, each running ``pipeline_factory(context)``, until they stop.

    The factory runs in each worker process and returns the pipeline to run there, typically
    ``rxhubs.consume(hub, group, store, owner_id=context.owner_id)`` piped into the work and a checkpoint. All
    workers use the same consumer group and store (a SQLite file, blob container, or any store several
    processes can share; not an in-memory store), so they balance the partitions between them.

    The factory must be picklable (a module-level function, or a ``functools.partial`` of one), and the
    script calling ``run_workers`` must guard it with ``if __name__ == "__main__":`` (workers are started
    with the spawn method and import the script's module).

    Args:
        pipeline_factory: ``factory(context: WorkerContext) -> Observable``, called once per worker start.
        workers: How many processes (default: the number of CPUs).
        owner_prefix: Owner ids are ``f"{owner_prefix}-w{index}"`` (default: host name and a random suffix).
        duration: Stop gracefully after this many seconds (default: run until Ctrl-C/SIGTERM or until every
            pipeline completes).
        grace: Seconds each worker has to stop gracefully before it is cut off.
        restart: Pauses between restarts of a dying worker; ``max_retries`` deaths in a row (each after less
            than a minute of running) and it is given up on.
        lag: A :class:`rxhubs.operate.LagServer` (not started): it serves the group's lag over HTTP from this
            process while the workers run.
        gc_thresholds: Each worker's collector thresholds while its pipeline runs (see :func:`rxhubs.arun`).

    Returns:
        Events per worker, restarts and exit codes (:class:`WorkersSummary`).

    Raises:
        ConfigurationError: A bad argument, or a factory that cannot be sent to a process.

    Example:
        >>> def pipeline(context):  # doctest: +SKIP
        ...     hub = context.closing(rxhubs.EventHub.from_connection_string(CONN))
        ...     store = SqliteCheckpointStore("checkpoints.sqlite")
        ...     return rxhubs.consume(hub, "$Default", store, owner_id=context.owner_id).pipe(
        ...         hops.process(handle), hops.checkpoint(store))
        >>> if __name__ == "__main__":  # doctest: +SKIP
        ...     print(rxhubs.run_workers(pipeline, workers=2))
    """
    count = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"workers must be a whole number >= 1, not {workers!r}")
    if duration is not None and not duration > 0:
        raise ConfigurationError("duration must be > 0 seconds")
    if not grace > 0:
        raise ConfigurationError("grace must be > 0 seconds")
    _check_factory(pipeline_factory)
    prefix = owner_prefix or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    mp = multiprocessing.get_context("spawn")
    slots = [_Slot(i, count, f"{prefix}-w{i}", mp) for i in range(count)]
    if lag is not None:
        lag.start()
    try:
        return _Supervisor(slots, mp, pipeline_factory, duration, Running(grace, gc_thresholds), restart).run()
    finally:
        if lag is not None:
            lag.stop()


class _Supervisor:
    """The parent's loop: start, watch, restart, stop."""

    def __init__(self, slots: list[_Slot], mp: Any, factory: Any, duration: float | None, running: Running,
                 restart: Backoff) -> None:
        self.slots, self.mp, self.factory = slots, mp, factory
        self.duration, self.running, self.restart = duration, running, restart
        self.stopping = False
        self.stop_requests = 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requests += 1
        self._signal_all(signal.SIGTERM)  # the second request reaches the workers as a second SIGTERM: cut off

    def _signal_all(self, sig: signal.Signals) -> None:
        self.stopping = True
        for slot in self.slots:
            if slot.alive and slot.process.pid is not None:
                try:
                    os.kill(slot.process.pid, sig)
                except ProcessLookupError:
                    pass

    def run(self) -> WorkersSummary:
        handled = (signal.SIGINT, signal.SIGTERM)
        main_thread = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, self._on_signal) for s in handled} if main_thread else {}
        started = time.monotonic()
        try:
            siblings = self.mp.Barrier(len(self.slots)) if len(self.slots) > 1 else None
            for slot in self.slots:
                slot.start(self.mp, self.factory, self.running, siblings)
            _log.info("started %d workers", len(self.slots))
            while True:
                now = time.monotonic()
                if self.duration is not None and not self.stopping and now - started >= self.duration:
                    _log.info("duration reached: stopping the workers")
                    self._signal_all(signal.SIGTERM)
                self._reap(now)
                if all(s.reaped and s.restart_at is None for s in self.slots):
                    break
                sentinels = [s.process.sentinel for s in self.slots if s.alive]
                if sentinels:
                    multiprocessing.connection.wait(sentinels, timeout=_POLL)
                else:
                    time.sleep(_POLL)
        except BaseException:
            self._signal_all(signal.SIGKILL)
            raise
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            for slot in self.slots:
                if slot.process is not None:
                    slot.process.join(timeout=self.running.grace + 5)
        return WorkersSummary(tuple(slot.report() for slot in self.slots))

    def _reap(self, now: float) -> None:
        for slot in self.slots:
            if slot.restart_at is not None:
                if self.stopping:
                    slot.restart_at = None
                elif now >= slot.restart_at:
                    slot.restarts += 1
                    slot.context.incarnation += 1
                    _log.warning("restarting worker %s (restart %d)", slot.context.owner_id, slot.restarts)
                    slot.start(self.mp, self.factory, self.running)
                continue
            process = slot.process
            if process is None or slot.reaped or process.is_alive():
                continue
            slot.reaped = True
            process.join()
            code = process.exitcode
            slot.exit_code = code
            if code == 0 or self.stopping or slot.gave_up:
                continue
            slot.failures = 1 if now - slot.started >= _STABLE_AFTER else slot.failures + 1
            limit = self.restart.max_retries
            if limit is not None and slot.failures > limit:
                slot.gave_up = True
                _log.error("worker %s died %d times in a row (exit %s): giving up on it",
                           slot.context.owner_id, slot.failures, code)
                continue
            delay = self.restart.delay(slot.failures)
            _log.warning("worker %s died (exit %s): restarting in %.1f s", slot.context.owner_id, code, delay)
            slot.restart_at = now + delay
