"""The chaos run's fault types and its seeded schedule (pure: the same seed and duration give the same plan).

Every fault type has a target kind (one consumer's hub path, its store path, its process or clock; or the
emulator, which every consumer feels), a duration range, the point recovery is measured from (its ``start``
for a fault whose harm outlives the action, e.g. a silenced connection that stays dead after the proxy heals;
its ``end`` otherwise) and a recovery bound in seconds (fault reference point -> every partition owned by a
live consumer and lag under 2 s, for 3 s in a row). The bounds follow from the run's settings: a load-balancing
interval L = 2 s, an ownership expiry E = 12 s, the SDK's 4 s back-off after server-busy and rxhubs' default
liveness (a dead path is noticed and events flow again within 30 s).

The plan places faults one after another with a seeded gap of 2-8 s: each fault type at least once in a
random order first (``partitions``, the one partition-count increase, only once), then random types while
time remains. At most two faults occupy the run at once (a fault occupies it from its start until its recovery
bound has passed, so a recovery is measured under one other fault at most), at most one of them hits the
emulator, no consumer takes two at once, and at least one consumer stays un-faulted.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

INTERVAL = 2.0  # L: load-balancing interval of the run's consumers
EXPIRY = 12.0  # E: ownership expiration
CHECKPOINT_INTERVAL = 1.0
LAG_OK = 2.0  # seconds of lag below which a partition counts as caught up
STABLE = 3.0  # the recovered state must hold this long
CONSUMERS = ("c1", "c2", "c3")
TAKEOVER = EXPIRY + 2 * INTERVAL + 5.0  # a dead owner's partitions read again by others


@dataclass(frozen=True)
class FaultType:
    """One kind of fault: what it targets, how long it lasts, where recovery is measured from, its bound."""

    name: str
    target: str  # "hub" | "store" | "process" | "clock" (a consumer) or "emulator" (everyone)
    duration: tuple[float, float]
    measure_from: str  # "start" | "end"
    bound: float
    what: str


FAULT_TYPES: dict[str, FaultType] = {f.name: f for f in (
    FaultType("hub_silent", "hub", (35.0, 35.0), "start", 40.0,
              "open connections to the hub drop every byte (no FIN, no RST); new ones pass"),
    FaultType("hub_blackhole", "hub", (30.0, 30.0), "end", 20.0,
              "every connection to the hub, open and new, silent for 30 s, then healed"),
    FaultType("hub_reset", "hub", (5.0, 15.0), "end", 20.0, "RST on every connection to the hub until healed"),
    FaultType("hub_latency", "hub", (15.0, 30.0), "end", 15.0, "1 s latency each way on the hub path"),
    FaultType("hub_bandwidth", "hub", (15.0, 30.0), "end", 20.0, "20 KB/s each way on the hub path"),
    FaultType("hub_slice", "hub", (15.0, 30.0), "end", 15.0, "writes sliced into 1-7 byte pieces on the hub path"),
    FaultType("hub_cut", "hub", (10.0, 20.0), "end", 20.0,
              "connections to the hub cut after a few KB (mid-frame) until healed"),
    FaultType("store_silent", "store", (10.0, 20.0), "end", TAKEOVER,
              "open connections to the blob store drop every byte; new ones pass"),
    FaultType("store_blackhole", "store", (10.0, 25.0), "end", TAKEOVER,
              "every connection to the blob store silent, then healed"),
    FaultType("server_busy", "emulator", (10.0, 10.0), "end", 15.0,
              "the emulator answers com.microsoft:server-busy on attach, flow and management"),
    FaultType("force_close", "emulator", (0.0, 0.0), "start", 20.0,
              "the emulator closes every connection with amqp:connection:forced"),
    FaultType("steal", "emulator", (0.0, 0.0), "start", TAKEOVER,
              "a partition's receiver detached with amqp:link:stolen (its owner avoids it until its record expires)"),
    FaultType("partitions", "emulator", (0.0, 0.0), "start", 3 * INTERVAL + 5.0,
              "the hub grows from 4 to 6 partitions (once)"),
    FaultType("promote", "emulator", (0.0, 0.0), "start", 20.0,
              "a geo-replication promotion: a new replication segment, string offsets, every connection closed"),
    FaultType("kill", "process", (3.0, 8.0), "end", TAKEOVER, "a consumer killed (-9), restarted after 3-8 s"),
    FaultType("zombie", "process", (EXPIRY + 3.0, EXPIRY + 8.0), "end", TAKEOVER,
              "a consumer paused (SIGSTOP) past its ownership expiry, then resumed"),
    FaultType("skew", "clock", (20.0, 40.0), "end", TAKEOVER,
              "a consumer's clock (its scheduler's now) shifted by up to a third of the expiry"),
)}

SETTLE = 8.0  # seconds after a fault's end before it stops occupying the run


@dataclass
class Fault:
    """One planned fault; ``params`` holds its knobs (e.g. the skew, the partition stolen)."""

    type: str
    start: float
    end: float
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def phases(duration: float) -> tuple[float, float]:
    """(warm-up end, last fault end) for a run of ``duration`` seconds."""
    return min(20.0, 0.15 * duration), duration - max(20.0, 0.125 * duration)


def _params(kind: FaultType, rng: random.Random) -> dict[str, Any]:
    if kind.name == "hub_cut":
        return {"after_bytes": rng.randint(500, 20_000)}
    if kind.name == "steal":
        return {"partition": str(rng.randrange(4))}
    if kind.name == "skew":
        return {"offset": round(rng.choice((-1, 1)) * rng.uniform(EXPIRY / 6, EXPIRY / 3), 2)}
    if kind.name == "server_busy":
        return {"on": ["attach", "flow", "management"]}
    if kind.name == "partitions":
        return {"count": 6}
    return {}


def _occupies(fault: Fault) -> tuple[float, float]:
    """A fault occupies the run from its start until its recovery bound has passed (or 8 s after its end)."""
    kind = FAULT_TYPES[fault.type]
    ref = fault.start if kind.measure_from == "start" else fault.end
    return fault.start, max(ref + kind.bound, fault.end + SETTLE)


def _conflicts(plan: list[Fault], kind: FaultType, start: float, end: float) -> tuple[list[Fault], set[str]]:
    """Faults occupying [start, end) that forbid ``kind`` there, and the consumers busy in that window."""
    overlapping = [f for f in plan if _occupies(f)[0] < end and start < _occupies(f)[1]]
    busy = {f.target for f in overlapping if f.target is not None}
    blocking = []
    if len(overlapping) >= 2:
        blocking = overlapping
    elif kind.target == "emulator":
        blocking = [f for f in overlapping if f.target is None]
    elif len(busy) >= len(CONSUMERS) - 1 or len(busy) >= len(CONSUMERS):
        blocking = [f for f in overlapping if f.target is not None]
    return blocking, busy


def make_schedule(seed: int, duration: float) -> list[Fault]:
    """The faults of a run, in start order (seconds from the run's start).

    Example:
        >>> plan = make_schedule(7, 480)
        >>> sorted({f.type for f in plan}) == sorted(FAULT_TYPES)
        True
        >>> make_schedule(7, 480) == plan
        True
    """
    rng = random.Random(seed)
    warmup, last_end = phases(duration)
    first = list(FAULT_TYPES)
    rng.shuffle(first)
    plan: list[Fault] = []
    t = warmup
    skipped = 0
    queue = list(first)
    while skipped < 40:
        name = queue.pop(0) if queue else rng.choice([n for n in FAULT_TYPES if n != "partitions"])
        kind = FAULT_TYPES[name]
        length = rng.uniform(*kind.duration)
        start = t + rng.uniform(2.0, 8.0)
        placed = None
        while start + length <= last_end and start + length + kind.bound <= duration - 5.0:
            end = start + length
            ref = start if kind.measure_from == "start" else end
            blocking, busy = _conflicts(plan, kind, start, max(ref + kind.bound, end + SETTLE))
            if not blocking:
                free = [c for c in CONSUMERS if c not in busy]
                target = rng.choice(free) if kind.target != "emulator" else None
                placed = Fault(name, round(start, 2), round(end, 2), target, _params(kind, rng))
                break
            start = min(_occupies(f)[1] for f in blocking) + 0.5
        if placed is None:
            skipped += 1
            continue
        plan.append(placed)
        plan.sort(key=lambda f: f.start)
        t = placed.start
    return plan


def describe(plan: list[Fault]) -> str:
    """The plan as lines a person reads (printed at the start of a run)."""
    lines = []
    for f in plan:
        knobs = " ".join(f"{k}={v}" for k, v in f.params.items() if k != "on")
        lines.append(f"{f.start:7.1f}s - {f.end:7.1f}s  {f.type:<15} {f.target or 'emulator':<9} {knobs}".rstrip())
    return "\n".join(lines)
