"""Scenario ``rebalance``: how many load-balancing intervals a consumer group takes to settle after a change.

Everything runs in virtual time (``TestScheduler``) over one :class:`~rxhubs.testing.InMemoryEventHub` and
one :class:`~rxhubs.stores.InMemoryCheckpointStore`, so the figures count intervals, not seconds, and do not
depend on the machine.

* **rxhubs**: the real thing: each consumer is a :func:`rxhubs.partitions` subscription whose partition
  streams are read, so a handover really finishes its batches, flushes and releases.
* **official rules**: the Azure SDK's processors, simulated side by side on the same store: every interval
  (plus the SDK's 0-20 % jitter) each lists the ownership records, runs ``_balance_ownership`` ported
  line for line from ``azure/eventhub/_eventprocessor/ownership_manager.py`` (azure-eventhub 5.x,
  ``OwnershipManager._balance_ownership``, greedy strategy) and claims the result; on a graceful stop it
  releases its partitions (``release_ownership``), on a crash it just stops.

Both sides use the same interval (10 s) and expiration (30 s). A group has *converged* when every partition
is owned by a live consumer, shares differ by at most one, and every consumer reads exactly what the store
says it owns (no handover under way). Convergence after a crash is counted from the moment the crashed
consumers' records expired (before that nobody may take them over).
"""

from __future__ import annotations

import logging
from typing import Any

from reactivex import abc

from rxhubs.balancing import partitions
from rxhubs.bench._report import figure, sized
from rxhubs.bench.rebalance._official import OFFICIAL, _Official
from rxhubs.bench.rebalance._sim import EXPIRY, GROUP, INTERVAL, _Group, _Store, _World

VIRTUAL_TIME = True  # TestScheduler only: figures are deterministic, CI requires every `met`

# the large run, (partitions, many, few): 1 consumer -> many -> few (the others crash), by size of run
FULL, QUICK, SMOKE = (1024, 200, 50), (1024, 60, 15), (128, 20, 5)


class _Rx(_Group):
    def __init__(self, world: _World) -> None:
        super().__init__(world)
        self.stores: dict[str, _Store] = {}
        self.subscriptions: dict[str, abc.DisposableBase] = {}
        self.streams: dict[str, set[str]] = {}

    def join(self, name: str) -> None:
        store = self.stores[name] = _Store(self.world.store)
        self.streams[name] = set()
        self.alive.add(name)

        def on_stream(stream: Any) -> None:
            self.moved += 1
            self.streams[name].add(stream.partition_id)
            stream.subscribe(
                on_completed=lambda: self.streams[name].discard(stream.partition_id), scheduler=self.world.scheduler
            )

        source = partitions(
            self.world.hub,
            GROUP,
            store,
            owner_id=name,
            load_balancing_interval=INTERVAL,
            ownership_expiration=EXPIRY,
            max_wait=INTERVAL,
        )
        self.subscriptions[name] = source.subscribe(on_stream, scheduler=self.world.scheduler)

    def leave(self, name: str) -> None:
        self.alive.discard(name)
        self.subscriptions[name].dispose()
        self.streams[name].clear()

    def crash(self, name: str) -> None:
        self.alive.discard(name)
        self.stores[name].silent = True
        self.subscriptions[name].dispose()
        self.streams[name].clear()

    def reading(self, name: str) -> set[str]:
        return self.streams[name]

    def calls(self) -> int:
        return sum(s.calls for s in self.stores.values())


# -- the official processor's rules, ported ---------------------------------------------------------------


def _steps_32(side: _Group, final: int) -> list[tuple[str, float | None, int]]:
    """1 consumer, then to 4 (or 2), then (for 4) back to 2 by graceful leave. Returns (step, intervals, moved)."""
    scheduler = side.world.scheduler
    out = []
    side_join = side.join  # type: ignore[attr-defined]
    scheduler.schedule_absolute(0.0, lambda *_: side_join("c0"))
    side.settle(0.0, 5)
    t = 60.0
    scheduler.advance_to(t)
    moved = side.moved
    for i in range(1, final):
        scheduler.schedule_absolute(t + 1.7 * i, lambda *_, i=i: side_join(f"c{i}"))
    out.append((f"1 -> {final}", side.settle(t + 1.7 * (final - 1), 40), side.moved - moved))
    if final == 4:
        t = 600.0
        scheduler.advance_to(t)
        moved = side.moved
        for name in ("c2", "c3"):
            side.leave(name)  # type: ignore[attr-defined]
        out.append(("4 -> 2", side.settle(t, 40), side.moved - moved))
    return out


def _scale(side: _Group, many: int, few: int) -> list[tuple[str, float | None, int, float]]:
    """1 consumer, ``many``, then all but ``few`` crash. Returns (step, intervals, moved, calls/interval)."""
    world = side.world
    scheduler = world.scheduler
    join = side.join  # type: ignore[attr-defined]
    crash = side.crash  # type: ignore[attr-defined]
    out = []
    scheduler.schedule_absolute(0.0, lambda *_: join("c000"))
    side.settle(0.0, 5)
    t = 60.0
    scheduler.advance_to(t)
    moved, calls = side.moved, side.calls()
    for i in range(1, many):
        scheduler.schedule_absolute(t + (i % 50) * 0.1, lambda *_, i=i: join(f"c{i:03}"))
    last = t + 4.9
    took = side.settle(last, 40)
    span = (took or 40) * INTERVAL + (last - t)
    out.append((f"1 -> {many}", took, side.moved - moved, (side.calls() - calls) / (span / INTERVAL) / many))
    t = scheduler.clock + 60.0
    scheduler.advance_to(t)
    moved, calls = side.moved, side.calls()
    for i in range(few, many):
        crash(f"c{i:03}")
    expired = t + EXPIRY  # the crashed consumers renewed within the interval before t: expired by t + 30 s
    scheduler.advance_to(expired)
    took = side.settle(expired, 40)
    span = (took or 40) * INTERVAL + EXPIRY
    out.append((f"{many} -> {few} (crash)", took, side.moved - moved, (side.calls() - calls) / (span / INTERVAL) / few))
    return out


def _failover(side: _Group) -> float | None:
    """Two consumers share 32 partitions; one crashes. Seconds from its last renewal until the other reads all."""
    scheduler = side.world.scheduler
    join = side.join  # type: ignore[attr-defined]
    scheduler.schedule_absolute(0.0, lambda *_: join("c0"))
    scheduler.schedule_absolute(3.3, lambda *_: join("c1"))
    side.settle(3.3, 10)
    crash_at = 103.4  # c1's rounds are at 3.3 + 10k (the SDK's drift with jitter: crash when it is furthest)
    scheduler.advance_to(crash_at)
    side.crash("c1")  # type: ignore[attr-defined]
    last_renewal = max(r.last_modified_time or 0.0 for r in side.world.records() if r.owner_id == "c1")
    took = side.settle(crash_at, 10)
    return None if took is None else crash_at + took * INTERVAL - last_renewal


def run(args: Any) -> list[dict[str, Any]]:
    """Run the scenario; ``args.quick``: the large run's 1,024 partitions go 1 -> 60 -> 15 (``smoke``: 128, 20, 5)."""
    quiet = logging.getLogger("rxhubs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # crashed consumers' failed releases are expected here
    try:
        return _run(sized(args, FULL, QUICK, SMOKE))
    finally:
        quiet.setLevel(level)


def _run(size: tuple[int, int, int]) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    for final in (2, 4):
        ours = _steps_32(_Rx(_World(32)), final)
        theirs = _steps_32(_Official(_World(32)), final)
        for (step, mine, moved), (_, base, base_moved) in zip(ours, theirs, strict=True):
            scenario = f"rebalance 32 partitions {step}"
            figures.append(_intervals(scenario, mine, base))
            figures.append(
                figure(
                    scenario,
                    "partitions_moved",
                    "partitions",
                    moved,
                    base_moved,
                    OFFICIAL,
                    None,
                    higher_is_better=False,
                )
            )
    mine_s, base_s = _failover(_Rx(_World(32))), _failover(_Official(_World(32)))
    figures.append(
        figure(
            "failover 32 partitions, 1 of 2 consumers killed",
            "seconds_from_last_renewal_until_all_resumed",
            "s",
            round(mine_s, 2) if mine_s is not None else float("inf"),
            round(base_s, 2) if base_s is not None else None,
            OFFICIAL,
            f"<= {EXPIRY + INTERVAL / 2:g} s (expiry + interval/2)",
            higher_is_better=False,
            met=mine_s is not None and mine_s <= EXPIRY + INTERVAL / 2,
        )
    )
    figures += scale_figures("rebalance", size)
    return figures


def scale_figures(label: str, size: tuple[int, int, int]) -> list[dict[str, Any]]:
    """The large run's steps (``size``: partitions, then 1 -> many -> few consumers, with crashes) as figures."""
    partitions, many, few = size
    ours = _scale(_Rx(_World(partitions)), many, few)
    theirs = _scale(_Official(_World(partitions)), many, few)
    figures: list[dict[str, Any]] = []
    for (step, mine, moved, calls), (_, base, base_moved, base_calls) in zip(ours, theirs, strict=True):
        scenario = f"{label} {partitions} partitions {step}"
        figures.append(_intervals(scenario, mine, base))
        figures.append(
            figure(
                scenario, "partitions_moved", "partitions", moved, base_moved, OFFICIAL, None, higher_is_better=False
            )
        )
        figures.append(
            figure(
                scenario,
                "store_calls_per_consumer_per_interval",
                "calls",
                round(calls, 2),
                round(base_calls, 2),
                OFFICIAL,
                None,
                higher_is_better=False,
            )
        )
    return figures


def _intervals(scenario: str, mine: float | None, base: float | None) -> dict[str, Any]:
    value = mine if mine is not None else float("inf")
    return figure(
        scenario,
        "intervals_to_converge",
        "intervals",
        value,
        base if base is not None else None,
        OFFICIAL if base is not None else f"{OFFICIAL} (did not converge within 40 intervals)",
        "<= 2 intervals",
        higher_is_better=False,
        met=mine is not None and mine <= 2.0,
    )
