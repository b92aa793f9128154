"""Scenario ``state``: a windowed count with its state checkpointed against the same count kept in memory only.

Same emulator (its own process), same pre-filled partitions, fresh processes per trial, alternating sides
(``_worker``). The count is per device and minute of event time (events of about 1 KB; the device and the
event time are application properties); ``state`` is ``hops.window`` with its state committed with each
checkpoint, ``plain`` the same count in a dict that is never saved. Both checkpoint every second into an
in-memory store that counts writes.

* ``events_per_s``: throughput, state against plain (target >= 0.85x, judged by ``normalised_ratio``).
  Wall clock (``ratio``) and whole-process CPU time (``cpu_ratio``, plain over state, from the first batch to
  the last) are printed beside it, but both move with the machine: on two shared cores the same code's CPU
  time moved by up to 2x within minutes, and plain against plain gave 0.74x to 1.72x. So each trial's CPU is
  split (``_worker.CpuSplit``) into its pipeline after the source (``pipeline_cpu_s``: count, clock,
  checkpoint with its state), garbage collection (``gc_s``, wherever it ran) and the source path
  (``source_cpu_s``: receive, conversion, event loop, store calls: the same code on the same events on both
  sides, run in the same seconds, so it clocks the trial's machine speed). ``normalised_ratio`` is the median
  of ``(1 + (pipeline + gc) / source)`` of plain over the same of state, per pair: the throughput ratio at
  equal source speed (plain against plain: 0.94x to 1.04x). Beside it ``stage_cpu_s``, the CPU time of the
  count itself on each side, and ``state_us_per_event``, their difference per event at the plain trial's source
  speed: what the window operator costs over the dict;
* ``store_writes_per_partition_per_interval``: unchanged by state (one write carries checkpoint and state),
  at most one per interval; measured from each partition's first write to its last before the trial stopped;
* ``handover_s_1mib``: from a new owner's start to its first batch, after the former owner released a
  partition holding about 1 MiB of state, against the same handover without state (target: at most 0.2 s more);
* ``state_bytes_after_traffic``: the state committed per partition once the traffic stopped and every window
  closed (target <= 1 KiB: closed windows leave nothing behind).
"""

from __future__ import annotations

import base64
import random
import statistics
from typing import Any

from rxhubs.bench._procs import emulator_process, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 4
DEVICES = 100
BASE = 1_767_225_600.0  # 2026-01-01T00:00:00Z: synthetic event time
PAD = 900  # bytes of padding: events of about 1 KB
WORKER = "rxhubs.bench.state._worker"


def _send(connection_string: str, per_partition: dict[str, list[tuple[dict[str | bytes, Any], str]]]) -> None:
    """Send ``(properties, body)`` events to their partitions, in as few batches as fit."""
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for pid, events in per_partition.items():
            while events:
                batch = producer.create_batch(partition_id=pid)
                n = 0
                for properties, body in events:
                    event = EventData(body)
                    event.properties = dict(properties)
                    try:
                        batch.add(event)
                    except ValueError:
                        break
                    n += 1
                producer.send_batch(batch)
                events = events[n:]


def _prefill_counts(connection_string: str, events: int) -> int:
    """``events`` readings of DEVICES devices, 0.1 s of event time apart, then a far-future one per partition.

    The device and the event time are application properties (``d``, ``t``), so neither side parses the body.
    """
    rng = random.Random(27)
    per: dict[str, list[tuple[dict[str | bytes, Any], str]]] = {str(p): [] for p in range(PARTITIONS)}
    for n in range(events):
        device = rng.randrange(DEVICES)
        time = round(BASE + n * 0.1 - rng.uniform(0, 3), 3)
        per[str(device % PARTITIONS)].append(({"d": f"dev-{device}", "t": time}, "x" * PAD))
    for pid in per:  # closes every window: the committed state must shrink back to (almost) nothing
        per[pid].append(({"d": "end", "t": BASE + events * 0.1 + 3600}, ""))
    _send(connection_string, per)
    return events + PARTITIONS


def _prefill_handover(connection_string: str, keys: int) -> None:
    """``keys`` keys in one partition, each with a 1 KiB value barely compressible: about ``keys`` KiB of state."""
    rng = random.Random(26)
    _send(connection_string, {"0": [
        ({"d": f"key-{n}", "t": BASE + n * 0.001}, base64.b64encode(rng.randbytes(768)).decode())
        for n in range(keys)
    ]})


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate plain and state trials; report medians (and the median of the paired ratios)."""
    events = sized(args, 100_000, 30_000, 2_000)
    keys = sized(args, 1400, 1400, 32)
    repeat = sized(args, 3, 1, 1)
    with emulator_process({"counts": PARTITIONS, "handover": 1}) as conns:
        total = _prefill_counts(conns["counts"], events)
        _prefill_handover(conns["handover"], keys)
        env = {"RXHUBS_BENCH_EVENTHUB": conns["counts"], "RXHUBS_BENCH_HANDOVER": conns["handover"]}
        trials: dict[str, list[dict[str, Any]]] = {"plain": [], "state": []}
        handovers: dict[str, list[dict[str, Any]]] = {"plain": [], "state": []}
        for _ in range(repeat):
            for mode in ("plain", "state"):
                trials[mode].append(run_worker(WORKER, ["throughput", "--mode", mode, "--events", str(total)], env))
                handovers[mode].append(run_worker(WORKER, ["handover", "--mode", mode], env))
    return _figures(trials, handovers, events=total, keys=keys, repeat=repeat)


def _writes_per_interval(trial: dict[str, Any]) -> float:
    """Checkpoint writes per partition per interval in steady state.

    Measured from each partition's first write to its last one before the trial stopped (``write_rates``), so
    the final flush and where the trial's end falls between two writes are left out. A trial too short for two
    such writes falls back on the count over its length, less each partition's first write and final flush.
    """
    rates = trial.get("write_rates")
    if rates:
        return float(statistics.mean(rates.values()))
    writes = trial["writes"]
    per_partition = sum(writes.values()) / max(1, len(writes))
    return float(max(0.0, per_partition - 2) / max(1.0, trial["intervals"]))


def _normalised(trials: dict[str, list[dict[str, Any]]]) -> list[float]:
    """Per pair, ``1 + (pipeline + gc) / source`` of plain over that of state; [] without the split figures.

    The source path is the same code on the same events on both sides, so its CPU time clocks how fast the
    machine ran each trial; the pipeline and garbage collection are where the sides differ.
    """
    def cost(trial: dict[str, Any]) -> float:
        return 1 + float(trial["pipeline_cpu_s"] + trial["gc_s"]) / float(trial["source_cpu_s"])

    if not all(t.get("source_cpu_s") for m in ("plain", "state") for t in trials[m]):
        return []
    return [cost(p) / cost(s) for s, p in zip(trials["state"], trials["plain"], strict=True)]


def _figures(trials: dict[str, list[dict[str, Any]]], handovers: dict[str, list[dict[str, Any]]], *,
             events: int, keys: int, repeat: int) -> list[dict[str, Any]]:
    rate = {m: [t["events_per_s"] for t in trials[m]] for m in trials}
    pairs = [s / p for s, p in zip(rate["state"], rate["plain"], strict=True) if p]
    cpu = {m: [t["cpu_s"] for t in trials[m]] for m in trials}  # the same events: less CPU is more throughput
    cpu_pairs = [p / s for s, p in zip(cpu["state"], cpu["plain"], strict=True) if s]
    # the count's own CPU (window operator or dict), without what both pipelines do alike: what state costs
    stage = {m: [t.get("stage_cpu_s", 0.0) for t in trials[m]] for m in trials}
    # (with the split figures, the state side's count is first scaled to the plain trial's machine speed)
    speed = [p.get("source_cpu_s") / s["source_cpu_s"] if p.get("source_cpu_s") and s.get("source_cpu_s") else 1.0
             for s, p in zip(trials["state"], trials["plain"], strict=True)]
    extra = [(s * k - p) / events * 1e6 for s, p, k in zip(stage["state"], stage["plain"], speed, strict=True)]
    throughput = figure(
        "state", "events_per_s", "events/s", round(statistics.median(rate["state"])),
        round(statistics.median(rate["plain"])), "the same count in memory, no state saved", ">= 0.85x",
        partitions=PARTITIONS, events=events, event_bytes=PAD + 60, trials=repeat,
        pair_ratios=[round(r, 3) for r in pairs],
        cpu_s={m: round(statistics.median(v), 3) for m, v in cpu.items()},
        cpu_ratio=round(statistics.median(cpu_pairs), 4) if cpu_pairs else None,
        stage_cpu_s={m: round(statistics.median(v), 3) for m, v in stage.items()},
        state_us_per_event=round(statistics.median(extra), 2),
    )
    throughput["ratio"] = round(statistics.median(pairs), 4) if pairs else None
    # judged at equal source speed: wall-clock pairs moved from 0.77x to 1.43x between runs of the same code, and
    # whole-process CPU time from 0.74x to 0.91x (docs/performance.md, "Figures below their targets")
    paced = _normalised(trials)
    if paced:
        throughput.update(
            normalised_ratio=round(statistics.median(paced), 4), normalised_pairs=[round(r, 3) for r in paced],
            **{f: {m: round(statistics.median(t[f] for t in trials[m]), 3) for m in trials}
               for f in ("pipeline_cpu_s", "gc_s", "source_cpu_s")},
        )
    judged_by = "normalised_ratio" if paced else "cpu_ratio" if throughput["cpu_ratio"] is not None else "ratio"
    judged = throughput[judged_by]
    throughput["judged_by"] = judged_by
    throughput["met"] = judged is not None and judged >= 0.85
    writes = {m: statistics.median(_writes_per_interval(t) for t in trials[m]) for m in trials}
    store_writes = figure(
        "state", "store_writes_per_partition_per_interval", "writes", round(writes["state"], 3),
        round(writes["plain"], 3), "the same count in memory, no state saved", "unchanged",
        # at most one write per partition per interval, as without state (5% for the timers' slack)
        higher_is_better=False, met=writes["state"] <= max(writes["plain"], 1.0) * 1.05,
    )
    took = {m: statistics.median(h["handover_s"] for h in handovers[m]) for m in handovers}
    state_bytes = max(h["state_bytes"] for h in handovers["state"])
    handover = figure(
        "state", "handover_s_1mib", "s", round(took["state"], 4), round(took["plain"], 4),
        "the same handover without state", "<= +0.2 s", higher_is_better=False,
        met=took["state"] - took["plain"] <= 0.2, state_bytes=state_bytes, keys=keys,
        extra_s=round(took["state"] - took["plain"], 4),
    )
    sizes = [size for t in trials["state"] for size in t["state_bytes"].values()]
    after = max(sizes) if sizes else 0
    leftover = figure(
        "state", "state_bytes_after_traffic", "bytes/partition", after, None, None, "<= 1024 B",
        met=bool(sizes) and after <= 1024,
    )
    return [throughput, store_writes, handover, leftover]
