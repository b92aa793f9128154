"""Scenario ``handover``: events processed by two owners when a second consumer joins, rxhubs vs the SDK.

One emulator (own process), one Azurite, 16 partitions (8 with ``--quick``; ``--partitions N`` for another
count) under a steady load (800 events/s; ``--rate N`` for another), sent on a fixed clock so that each partition
gets its events one round apart (:func:`schedule`; ``events_per_s_sent`` reports the rate achieved). Consumer A
starts alone; B joins; both run a while; both stop. Each records every (partition, sequence number) it
processed (each batch takes 20 ms of "work"); an event both processed was processed by two owners. The official
processor (``EventHubConsumerClient`` with the official blob store, checkpointing every batch as its samples do) and
rxhubs (``consume`` + ``checkpoint``) run in turn with the same intervals (2 s balancing, 6 s expiry).
Target: 0 for rxhubs (the official processor was measured at 250 of 30,905 in the brief's test).

For each partition that moved from A to B it also reports the handover's timing: the old owner's last event to the
new owner's first (the gap; and to the new owner's first event the old owner had not processed, how long the
partition made no progress: the same without repeats), the new owner's claim (the store's answer giving it the
partition) to its first event, and A's cold start (process start to its first event); and, per consumer, the
checkpoint-store HTTP requests per load-balancing interval (counted in each side's storage client pipeline, so each
side runs its blob store as users pass it: rxhubs' ``BlobCheckpointStore`` fenced, ``--unfenced`` for the store
without its fence, for comparison; ``store_requests_by_kind`` splits them by method and blob) and the TCP
connections to the hub it held at the end. Medians and the 95th percentile over the moved partitions of six trials
per side (six handovers of half the partitions; two with ``--quick``, ``--trials N`` for another count), the two
sides' trials alternating; each side's figures are its own, from the same run. The ``handover_timeline`` figure
gives, per step of a handover, the median time from the old owner's last event: its stream closed, release written,
release seen by the newcomer, its claim, its checkpoint read (unfenced) or its fence answered (the fenced store's
``fence`` reads the checkpoint, or takes it from the hand its listing showed), its ``on_partition_initialize``, its
link attached (rxhubs), its first batch delivered and processed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized
from rxhubs.bench.handover._worker import INTERVAL

PARTITIONS = 16
QUICK_PARTITIONS = 8
SMOKE_PARTITIONS = 4
TRIALS = 6  # per side: six handovers of half the partitions each
RATE = 800  # events/s


#: Producer rounds before the first trial: the SDK's producer opens a link per partition on its first send to it,
#: and until every link is open some partitions go seconds without events; a trial that caught that measured a
#: stalled producer as a handover gap of several seconds (the first trial of a run, whichever side).
WARM_ROUNDS = 20


def schedule(rate: int, partitions: int) -> tuple[int, float]:
    """Events per partition per round, and the round's length, so that the producer sends ``rate`` events/s.

    Every partition gets the same number of events each round (about a tenth of a second's worth, at least one),
    so each partition's events come one round apart, exactly: the period a handover may take without keeping
    an event waiting. (Until 2026-11-28, evening, every partition got ``rate // partitions // 10`` events, at least one,
    and the producer slept 0.1 s after each round's sends: 300 events/s over 32 partitions was one event per
    partition every 0.13-0.2 s, about 200 events/s, and the period grew with the machine's load.)

    Example:
        >>> schedule(800, 16), schedule(300, 32), schedule(800, 32)
        ((5, 0.1), (1, 0.10666666666666667), (2, 0.08))
    """
    per = max(1, round(rate * 0.1 / partitions))
    return per, per * partitions / rate


def _producer(
    conn: str, stop: threading.Event, partitions: int, warm: threading.Event | None = None, rate: int = RATE,
    sent: list[tuple[float, int]] | None = None,
) -> None:
    """Send ``rate`` events/s on a fixed clock (see :func:`schedule`); note (wall time, events so far) in ``sent``."""
    from azure.eventhub import EventData, EventHubProducerClient

    per, period = schedule(rate, partitions)
    with EventHubProducerClient.from_connection_string(conn) as producer:
        n = rounds = 0
        due = time.monotonic()
        while not stop.is_set():
            for p in range(partitions):
                batch = producer.create_batch(partition_id=str(p))
                for _ in range(per):
                    batch.add(EventData(str(n)))
                    n += 1
                producer.send_batch(batch)
            rounds += 1
            if sent is not None:
                sent.append((time.time(), n))
            if warm is not None and rounds == WARM_ROUNDS:
                warm.set()
            due += period  # the next round on the clock: a slow round is followed by a prompt one
            now = time.monotonic()
            if due < now - 2 * period:  # far behind (the first sends open the links): no burst to catch up
                due = now
            time.sleep(max(0.0, due - now))


def achieved_rate(sent: list[tuple[float, int]], began: float, ended: float) -> float | None:
    """Events/s the producer sent between ``began`` and ``ended`` (wall times), from its notes.

    Example:
        >>> achieved_rate([(0.0, 0), (1.0, 100), (2.0, 300), (3.0, 310)], 0.5, 2.5)
        200.0
    """
    inside = [(t, n) for t, n in sent if began <= t <= ended]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return round((n1 - n0) / (t1 - t0), 1)


def _trial(
    impl: str, env: dict[str, str], folder: Path, alone: float, together: float, unfenced: bool = False
) -> dict[str, Any]:
    """Run A, then B as well; return what each recorded (see handover._worker), and the run's length."""
    container = f"handover-{uuid.uuid4().hex[:10]}"
    if impl == "sdk":
        import asyncio

        from azure.storage.blob.aio import ContainerClient

        async def create() -> None:
            async with ContainerClient.from_connection_string(env["RXHUBS_BENCH_STORAGE"], container) as c:
                await c.create_container()

        asyncio.run(create())
    procs, files = {}, {}
    logs = os.environ.get("RXHUBS_BENCH_WORKER_LOGS")  # a folder: keep each worker's stderr there
    began = time.time()
    for owner in ("a", "b"):
        if owner == "b":
            time.sleep(alone)
        stderr: Any = subprocess.DEVNULL
        if logs:
            stderr = files[owner] = open(Path(logs) / f"{container}-{impl}-{owner}.log", "w")  # noqa: SIM115
        procs[owner] = subprocess.Popen(
            [sys.executable, "-m", "rxhubs.bench.handover._worker", "--impl", impl, "--owner", owner,
             "--container", container, "--out", str(folder / f"{impl}-{owner}.json"),
             *(["--unfenced"] if unfenced and impl == "rxhubs" else [])],
            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
        out = procs[owner].stdout
        if out is not None:
            out.readline()  # "ready"
    time.sleep(together)
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        proc.wait(timeout=120)
    for file in files.values():
        file.close()
    records = {owner: json.loads((folder / f"{impl}-{owner}.json").read_text()) for owner in ("a", "b")}
    records["seconds"] = time.time() - began
    return records


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _p95(values: list[float]) -> float | None:
    """The 95th percentile, nearest rank (of 48 moves: the third largest)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 3)


#: The steps of a handover, in order, as (name, where the newcomer's record keeps it).
STEPS = (
    ("old_closed", None), ("release_written", None), ("release_seen", "seen_released"), ("claimed", "won"),
    ("checkpoint_read", "checkpoint_reads"), ("fenced", "fenced"), ("initialized", "claims"), ("link_open", "opened"),
    ("first_delivered", "delivered"), ("first_processed", None),
)


def _steps(a: dict[str, Any], b: dict[str, Any], pid: str, last_a: float, first_b: float) -> dict[str, float]:
    """Seconds from the old owner's last event to each step of one partition's handover that was seen."""
    at: dict[str, float] = {}
    if a["closes"].get(pid):  # the old owner's on_partition_close: its stream finished its batches
        at["old_closed"] = max(a["closes"][pid])
    if pid in a["released"]:
        at["release_written"] = a["released"][pid]
    claimed = b["won"].get(pid)
    for name, key in STEPS:
        if key is None:
            continue
        if key == "checkpoint_reads":
            after = [t for t in b[key] if claimed is not None and t >= claimed - 0.5]
            if after:
                at[name] = min(after)
        elif key == "claims":
            if b[key].get(pid):
                at[name] = min(b[key][pid])
        elif pid in b.get(key, {}):
            at[name] = b[key][pid]
    at["first_processed"] = first_b
    return {name: t - last_a for name, t in at.items()}


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Overlap, handover timing, store requests and connections from the two consumers' records of each trial."""
    twice = events = by_a = by_b = moved = holes = 0
    gaps: list[float] = []
    stalls: list[float] = []
    trial_medians: list[float | None] = []
    claim_to_first: list[float] = []
    cold: list[float] = []
    requests: list[float] = []
    by_kind: dict[str, float] = {}
    seconds: dict[str, list[float]] = {}
    looks = 0
    connections: list[int] = []
    steps: dict[str, list[float]] = {}
    for records in trials:
        a, b = records["a"], records["b"]
        seen_a = {(p, s) for p, s, _ in a["processed"]}
        seen_b = {(p, s) for p, s, _ in b["processed"]}
        twice += len(seen_a & seen_b)
        events += len(seen_a | seen_b)
        # lost: a sequence number below a partition's highest processed one that nobody processed
        highest: dict[str, int] = {}
        for p, s in seen_a | seen_b:
            highest[p] = max(s, highest.get(p, s))
        holes += sum(top + 1 for top in highest.values()) - len(seen_a | seen_b)
        by_a, by_b = by_a + len(seen_a), by_b + len(seen_b)
        last_a: dict[str, float] = {}
        first_b: dict[str, float] = {}
        for p, _, t in a["processed"]:
            last_a[p] = max(t, last_a.get(p, t))
        for p, _, t in b["processed"]:
            first_b[p] = min(t, first_b.get(p, t))
        pids = sorted(set(last_a) & set(first_b))
        moved += len(pids)
        gaps += [first_b[p] - last_a[p] for p in pids]
        # the stall: to the new owner's first event the old owner had not processed (its repeats are no progress)
        first_new: dict[str, float] = {}
        for p, s, t in b["processed"]:
            if (p, s) not in seen_a:
                first_new[p] = min(t, first_new.get(p, t))
        stalls += [first_new[p] - last_a[p] for p in pids if p in first_new]
        trial_medians.append(_median([first_b[p] - last_a[p] for p in pids]))
        claim_to_first += [first_b[p] - b["won"][p] for p in pids if p in b["won"]]
        for p in pids:
            for name, offset in _steps(a, b, p, last_a[p], first_b[p]).items():
                steps.setdefault(name, []).append(offset)
        first_a = min((t for _, _, t in a["processed"]), default=None)
        if first_a is not None:
            cold.append(first_a - a["started"])
        intervals = records["seconds"] / INTERVAL
        requests.append((a["store_calls"] + b["store_calls"]) / 2 / intervals)
        for kind, times in [*a.get("request_seconds", {}).items(), *b.get("request_seconds", {}).items()]:
            seconds.setdefault(kind, []).extend(times)
        for kind, n in [*a.get("requests", {}).items(), *b.get("requests", {}).items()]:
            by_kind[kind] = by_kind.get(kind, 0.0) + n / 2 / intervals / len(trials)
        looks += a.get("looks", 0) + b.get("looks", 0)
        connections += [a["connections"], b["connections"]]
    return {
        "twice": twice, "lost": holes, "events": events, "by_a": by_a, "by_b": by_b, "moved": moved,
        "gap_median": _median(gaps), "gap_max": round(max(gaps), 3) if gaps else None,
        "gap_p95": _p95(gaps), "gap_medians_per_trial": trial_medians,
        "stall_median": _median(stalls), "stall_p95": _p95(stalls),
        "claim_to_first_median": _median(claim_to_first),
        "cold_start": _median(cold),
        "store_requests_per_interval": round(statistics.mean(requests), 1) if requests else None,
        "store_requests_by_kind": {kind: round(n, 1) for kind, n in sorted(by_kind.items())},
        "store_request_seconds_median": {kind: _median(v) for kind, v in sorted(seconds.items())},
        "looks_per_trial": looks / len(trials) if trials else 0,
        "connections_per_consumer": connections,
        "timeline": {name: _median(steps[name]) for name, _ in STEPS if name in steps},
    }


def run(args: Any = None) -> list[dict[str, Any]]:
    """One trial per implementation, the official processor first; report overlaps and totals."""
    from rxhubs.testing._azurite import Azurite

    alone, together = sized(args, (8.0, 14.0), (8.0, 12.0), (4.0, 10.0))
    partitions, trials = sized(args, (PARTITIONS, TRIALS), (QUICK_PARTITIONS, 2), (SMOKE_PARTITIONS, 1))
    partitions = getattr(args, "partitions", None) or partitions
    trials = getattr(args, "trials", None) or trials
    rate = getattr(args, "rate", None) or RATE
    unfenced = bool(getattr(args, "unfenced", False))
    results: dict[str, dict[str, Any]] = {}
    sent_rate: float | None = None
    with emulator_process({"handover": partitions}) as conns, Azurite() as azurite, \
            tempfile.TemporaryDirectory() as tmp:
        env = {"RXHUBS_BENCH_EVENTHUB": conns["handover"], "RXHUBS_BENCH_STORAGE": azurite.connection_string}
        stop, warm = threading.Event(), threading.Event()
        sent: list[tuple[float, int]] = []
        producer = threading.Thread(
            target=_producer, args=(conns["handover"], stop, partitions, warm, rate, sent), daemon=True
        )
        producer.start()
        warm.wait(timeout=120)  # every partition's link open and sending steadily before the first trial
        began = time.time()
        try:
            runs: dict[str, list[dict[str, Any]]] = {"sdk": [], "rxhubs": []}
            for _ in range(trials):
                for impl in ("sdk", "rxhubs"):
                    runs[impl].append(_trial(impl, env, Path(tmp), alone, together, unfenced))
            results = {impl: summarize(records) for impl, records in runs.items()}
            sent_rate = achieved_rate(sent, began, time.time())
        finally:
            stop.set()
            producer.join(timeout=30)
    ours, theirs = results["rxhubs"], results["sdk"]
    baseline = "azure-eventhub EventHubConsumerClient + official blob store"

    def timing(metric: str, key: str, target: str | None) -> dict[str, Any]:
        mine, other = ours[key], theirs[key]
        met = None if target is None or mine is None else mine <= float(target.split()[1])
        return figure("handover", metric, "s", mine, other, baseline, target, higher_is_better=False, met=met,
                      partitions_moved_rxhubs=ours["moved"], partitions_moved_baseline=theirs["moved"])

    return [
        figure(
            "handover", "events_processed_by_two_owners", "events", ours["twice"], theirs["twice"], baseline, "0",
            # a newcomer that processed nothing proves nothing
            higher_is_better=False, met=ours["twice"] == 0 and ours["by_b"] > 0,
            events_rxhubs=ours["events"], events_baseline=theirs["events"], by_a_rxhubs=ours["by_a"],
            by_b_rxhubs=ours["by_b"], by_a_baseline=theirs["by_a"], by_b_baseline=theirs["by_b"],
            partitions=partitions, trials=trials, events_per_s=rate, events_per_s_sent=sent_rate,
            events_per_partition_period_s=round(schedule(rate, partitions)[1], 4), fenced=not unfenced,
        ),
        figure("handover", "events_lost", "events", ours["lost"], theirs["lost"], baseline, "0",
               higher_is_better=False, met=ours["lost"] == 0),
        figure("handover", "old_owner_last_to_new_owner_first_median", "s", ours["gap_median"],
               theirs["gap_median"], baseline, "<= baseline", higher_is_better=False,
               met=None if ours["gap_median"] is None or theirs["gap_median"] is None
               else ours["gap_median"] <= theirs["gap_median"],
               partitions_moved_rxhubs=ours["moved"], partitions_moved_baseline=theirs["moved"],
               trial_medians_rxhubs=ours["gap_medians_per_trial"],
               trial_medians_baseline=theirs["gap_medians_per_trial"]),
        timing("old_owner_last_to_new_owner_first_p95", "gap_p95", "<= 0.5 s"),
        # the same, to the new owner's first event the old owner had not processed: how long the partition made
        # no progress (an event processed twice is no progress; without repeats, the same as the gap)
        timing("old_owner_last_to_new_owner_first_new_median", "stall_median", None),
        timing("old_owner_last_to_new_owner_first_new_p95", "stall_p95", None),
        timing("old_owner_last_to_new_owner_first_max", "gap_max", None),
        timing("claim_to_first_event_median", "claim_to_first_median", "<= 0.5 s"),
        timing("cold_start_to_first_event", "cold_start", None),
        figure("handover", "store_requests_per_consumer_per_interval", "requests", ours["store_requests_per_interval"],
               theirs["store_requests_per_interval"], baseline, None, higher_is_better=False,
               # rxhubs: listings between rounds by a consumer awaiting a handover (both consumers, per trial)
               looks_per_trial_rxhubs=ours["looks_per_trial"], by_kind_rxhubs=ours["store_requests_by_kind"],
               by_kind_baseline=theirs["store_requests_by_kind"],
               # the storage account's round trip, median seconds per request, by method and blob
               request_seconds_rxhubs=ours["store_request_seconds_median"],
               request_seconds_baseline=theirs["store_request_seconds_median"]),
        figure("handover", "connections_per_consumer", "connections", max(ours["connections_per_consumer"]),
               max(theirs["connections_per_consumer"]), baseline, None, higher_is_better=False,
               rxhubs_a_b=ours["connections_per_consumer"], baseline_a_b=theirs["connections_per_consumer"]),
        figure("handover", "handover_timeline_median", "s", ours["timeline"].get("first_processed"),
               theirs["timeline"].get("first_processed"), baseline, None, higher_is_better=False,
               steps_rxhubs=ours["timeline"], steps_baseline=theirs["timeline"]),
    ]
