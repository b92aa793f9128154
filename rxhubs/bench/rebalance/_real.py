"""``rxhubs bench scale --real``: many partitions in real processes: 1 -> 8 -> 4 consumers, fenced blob store.

One emulator (own process) with a hub of 1,024 partitions (256 with ``--quick``, 32 with ``--smoke``; ``--partitions
N`` for another count), one Azurite, 16 producers sending a steady trickle to every partition (one event per
partition per round, ``--rate`` events/s in all, 200 by default: :mod:`~rxhubs.bench.rebalance._trickle`), and
consumer processes: the ``handover``
scenario's rxhubs worker (``rxhubs.consume`` + 20 ms of work per batch + ``hops.checkpoint`` on the fenced
``BlobCheckpointStore``). Its intervals follow docs/operations.md's guidance for large hubs (:func:`settings`):
a load-balancing interval of one second per 100 partitions (2 s at least: 10.24 s at 1,024), an ownership expiry of
6 intervals, a checkpoint per partition every 3 intervals (5 s at least) and the collector's thresholds
``arun(..., gc_thresholds=(50_000, 20, 100))``. One consumer starts and takes every
partition; seven more join (1 -> 8); four stop gracefully (8 -> 4); the rest stop at the end.

Figures, each from this one run:

* ``converge_1``, ``converge_8``, ``converge_4``: load-balancing intervals from each change (the first consumer
  let go; the seven joiners let go together; the stop signals: each worker imports rxhubs, prints "ready" and waits
  at a start line, so seven processes' imports on two cores do not count as balancing) to the last store write
  that moved a partition to another owner (a claim won, a release, a hand to a recipient: every consumer logs the
  answers of its own writes), counted once the ownership blobs show every partition owned by a live consumer and
  the shares even (differing by at most one). Target: within 2 intervals per change, and no partition moved
  after that until the next change (``moved_after_seen``: a consumer that gives up what it was just given and
  claims it back a round later settled late, though every share looked even in between).
* ``store_requests_per_interval``: HTTP requests to the storage account per consumer per interval (counted in
  each worker's storage pipeline, retries included), the busiest consumer, beside the official processor's rule
  of one listing and one claim per owned partition per interval plus its checkpoint writes; ``steady`` gives the
  same per consumer over the settled stretch after the last change (renewals, listings, checkpoints only).
* ``memory_per_partition``: the first consumer's resident memory when it owned every partition, less a newcomer's
  once it owns its share (both past their imports and connections), per partition of the difference.
* ``owned_twice``: events processed by two consumers (target 0); ``events_lost``: events sent that nobody
  processed (target 0).

The machine's load average is printed beside the figures: this runs many processes on a shared machine.

For development (none of them changes a figure's meaning): ``RXHUBS_BENCH_SCALE_INTERVAL`` sets the load-balancing
interval instead of the guidance's (e.g. 10.24 with ``--partitions 256``, to see a large hub's timing at a quarter of
its cost); ``RXHUBS_BENCH_BALANCING_LOG=1`` has each worker log its balancing rounds (how long each took, what it
planned), its releases and its losses, with wall times, into ``RXHUBS_BENCH_WORKER_LOGS``; ``RXHUBS_BENCH_KEEP`` keeps
each worker's record (what it processed and when, its store writes that moved a partition);
``RXHUBS_BENCH_GC_LOG=1`` has each worker log the collector's pauses every 10 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized
from rxhubs.bench.rebalance._trickle import produce

FULL, QUICK, SMOKE = (1024, 8, 4), (256, 8, 4), (32, 4, 2)
RATE = 200
SETTLE_INTERVALS = 2  # intervals the group runs converged before the next change
TIMEOUT_INTERVALS = 30  # a change that has not converged by then is reported as such
POLLS_PER_INTERVAL = 4  # listings of the ownership blobs per interval, to see convergence (the time is the writes')
LARGE_HUB_GC = (50_000, 20, 100)  # docs/operations.md, large hubs: ``arun(..., gc_thresholds=...)``


def settings(partitions: int) -> tuple[float, float, float]:
    """The run's load-balancing interval, ownership expiry and checkpoint interval for ``partitions`` (seconds).

    docs/operations.md's guidance for large hubs: a second of interval per 100 partitions (2 s at least), an
    expiry of 6 intervals (a renewal may fail or come late several times on a loaded machine before anything
    moves), a checkpoint per partition every 3 intervals (5 s at least): what the run's consumers and one Azurite
    carry on two cores, where each store request costs about 1.5 ms of the consumer's CPU and 2 ms of Azurite's.

    Example:
        >>> settings(32), settings(1024)
        ((2.0, 12.0, 6.0), (10.24, 61.44, 30.72))
    """
    interval = float(os.environ.get("RXHUBS_BENCH_SCALE_INTERVAL") or max(2.0, partitions / 100))
    return interval, 6 * interval, max(5.0, 3 * interval)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _services() -> dict[str, list[int]]:
    """The emulator's and Azurite's process ids (children of this process), to weigh their CPU."""
    import psutil

    found: dict[str, list[int]] = {"emulator": [], "azurite": []}
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "BackgroundEmulator" in line:
            found["emulator"].append(child.pid)
        elif "azurite" in line:
            found["azurite"].append(child.pid)
    return found


class _Group:
    """The consumer processes and what the ownership blobs say about them."""

    def __init__(self, env: dict[str, str], container: str, folder: Path, partitions: int) -> None:
        self.env, self.container, self.folder, self.partitions = env, container, folder, partitions
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.live_at_steady: list[str] = []

    def start(self, owner: str) -> None:
        logs = os.environ.get("RXHUBS_BENCH_WORKER_LOGS")  # a folder: keep each worker's stderr there
        stderr: Any = open(Path(logs) / f"{owner}.log", "w") if logs else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "rxhubs.bench.handover._worker", "--impl", "rxhubs", "--owner", owner,
             "--container", self.container, "--out", str(self.folder / f"{owner}.json"), "--start-line"],
            env={**os.environ, **self.env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
        if logs:
            stderr.close()  # the child has its own copy
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready": imported, waiting at the start line
        self.procs[owner] = proc

    def go(self, owners: list[str]) -> float:
        """Let the consumers ``owners`` (started, ready) begin consuming, together; the time they were let go."""
        for owner in owners:
            stdin = self.procs[owner].stdin
            assert stdin is not None
            stdin.write("go\n")
            stdin.flush()
        return time.time()

    def stop(self, owners: list[str]) -> None:
        for owner in owners:
            self.procs[owner].send_signal(signal.SIGTERM)
        for owner in owners:
            self.procs[owner].wait(timeout=300)

    @property
    def live(self) -> list[str]:
        return [o for o, p in self.procs.items() if p.poll() is None]

    async def owners(self, store: Any, ns: str, hub: str) -> dict[str, str]:
        return {o.partition_id: o.owner_id for o in await store.list_ownership(ns, hub, "$Default")}

    def converged(self, owners: dict[str, str], live: list[str]) -> bool:
        if len(owners) < self.partitions or any(owners.get(str(p)) not in live for p in range(self.partitions)):
            return False
        shares = Counter(owners.values())
        counts = [shares.get(o, 0) for o in live]
        return max(counts) - min(counts) <= 1


async def _measure(group: _Group, storage: str, ns: str, hub: str, many: int, few: int,
                   interval: float) -> dict[str, Any]:
    from rxhubs.stores import BlobCheckpointStore

    result: dict[str, Any] = {"seen": {}}
    async with BlobCheckpointStore.from_connection_string(storage, group.container) as store:

        async def until_converged(name: str, began: float, owners: list[str]) -> None:
            deadline = began + TIMEOUT_INTERVALS * interval
            while time.time() < deadline:
                if group.converged(await group.owners(store, ns, hub), owners):
                    result["seen"][name] = (began, time.time())  # the change, and when a listing showed it done
                    return
                await asyncio.sleep(interval / POLLS_PER_INTERVAL)
            result["seen"][name] = (began, None)  # did not converge

        changes: dict[str, float] = {}
        result["changes"] = changes
        await asyncio.to_thread(group.start, "c0")
        began = changes["start c0"] = group.go(["c0"])  # from its start line (process start-up is not balancing)
        await until_converged("converge_1", began, ["c0"])
        cpu = _cpu_s(group.procs["c0"].pid), time.time()
        await asyncio.sleep(SETTLE_INTERVALS * interval)
        # every partition owned, nothing moving: what the owner of them all spends per second (idle partitions)
        result["owner_cpu"] = (_cpu_s(group.procs["c0"].pid) - cpu[0]) / (time.time() - cpu[1])
        all_kib = _rss_kib(group.procs["c0"].pid)  # the first consumer, every partition owned
        await asyncio.gather(*(asyncio.to_thread(group.start, f"c{i}") for i in range(1, many)))
        # all of them imported and ready, let go together: the seven join at one moment
        began = changes[f"join c1-c{many - 1}"] = group.go([f"c{i}" for i in range(1, many)])
        await until_converged(f"converge_{many}", began, [f"c{i}" for i in range(many)])
        await asyncio.sleep(SETTLE_INTERVALS * interval)
        # a newcomer owns a share, has imported and connected as the first did, and never held more: the
        # difference per partition is what a partition costs a consumer (imports and connections cancel out)
        share_kib = sum(_rss_kib(group.procs[f"c{i}"].pid) for i in range(1, many)) / (many - 1)
        result["memory_per_partition_kib"] = round((all_kib - share_kib) / (group.partitions * (1 - 1 / many)), 2)
        result["memory_kib"] = {"one_consumer_all": all_kib, "newcomer_share": round(share_kib)}
        began = changes[f"stop c{few}-c{many - 1}"] = time.time()
        leaving = [f"c{i}" for i in range(few, many)]
        stopping = asyncio.ensure_future(asyncio.to_thread(group.stop, leaving))
        await until_converged(f"converge_{few}", began, [f"c{i}" for i in range(few)])
        await stopping
        settled = time.time()
        group.live_at_steady = group.live
        pids = {**_services(), **{o: [group.procs[o].pid] for o in group.live}}
        before = {name: sum(_cpu_s(pid) for pid in ids) for name, ids in pids.items()}
        await asyncio.sleep(SETTLE_INTERVALS * interval)
        result["steady"] = (settled, time.time())
        result["steady_cpu"] = {name: round((sum(_cpu_s(pid) for pid in ids) - before[name]) / (time.time() - settled),
                                            3) for name, ids in pids.items()}
    return result


def convergence(seen: dict[str, tuple[float, float | None]], moves: list[tuple[str, str, float]],
                interval: float) -> dict[str, float | None]:
    """Intervals from each change to the last write that moved a partition before the change was seen converged.

    ``seen``: change name -> (when it began, when a listing showed it converged; None: never). ``moves``: every
    consumer's writes that named a new owner (partition, owner, wall time answered). A change whose listing showed it
    converged with no write since it began (nothing had to move) counts 0.

    Example:
        >>> convergence({"c": (100.0, 112.0)}, [("0", "a", 99.0), ("1", "b", 105.0), ("1", "", 111.0)], 2.0)
        {'c': 5.5}
        >>> convergence({"c": (100.0, None)}, [], 2.0)
        {'c': None}
    """
    found: dict[str, float | None] = {}
    for name, (began, done) in seen.items():
        if done is None:
            found[name] = None
            continue
        last = max((at for _, _, at in moves if began <= at <= done), default=began)
        found[name] = round((last - began) / interval, 2)
    return found


def moved_after(seen: dict[str, tuple[float, float | None]], moves: list[tuple[str, str, float]],
                ends: list[float]) -> dict[str, int]:
    """Writes that moved a partition after each change was seen converged, before the next began (``ends``, in order).

    Churn the convergence figure does not show: a consumer that releases what it had just been given and claims it
    back a round later, after the listing saw every owner at its share.

    Example:
        >>> moved_after({"a": (100.0, 110.0), "b": (200.0, 205.0)}, [("0", "x", 109.0), ("0", "", 150.0),
        ...             ("0", "y", 210.0), ("1", "", 250.0)], [200.0, 240.0])
        {'a': 1, 'b': 1}
    """
    return {name: 0 if done is None else sum(1 for _, _, at in moves if done < at < end)
            for (name, (_, done)), end in zip(seen.items(), ends, strict=True)}


def _ledger(
    folder: Path, owners: list[str], began: float
) -> tuple[dict[str, Any], Counter[tuple[str, int]], dict[str, dict[str, float]]]:
    records = {o: json.loads((folder / f"{o}.json").read_text()) for o in owners}
    processed: Counter[tuple[str, int]] = Counter()
    by: dict[str, dict[str, float]] = {}  # "pid/seq" -> owner -> seconds into the run it was processed
    for owner, record in records.items():
        for pid, seq, at in record["processed"]:
            processed[(pid, seq)] += 1
            by.setdefault(f"{pid}/{seq}", {})[owner] = round(at - began, 2)
    return records, processed, by


def run_real(args: Any) -> list[dict[str, Any]]:
    """The run above; see the module."""
    from rxhubs.testing._azurite import Azurite

    partitions, many, few = sized(args, FULL, QUICK, SMOKE)
    partitions = getattr(args, "partitions", None) or partitions
    rate = getattr(args, "rate", None) or RATE
    interval, expiry, checkpoint_s = settings(partitions)
    stop, warm = threading.Event(), threading.Event()
    counts: dict[str, int] = {}
    with emulator_process({"scale": partitions}) as conns, Azurite() as azurite, \
            tempfile.TemporaryDirectory() as tmp:
        conn = conns["scale"]
        env = {"RXHUBS_BENCH_EVENTHUB": conn, "RXHUBS_BENCH_STORAGE": azurite.connection_string,
               "RXHUBS_BENCH_INTERVAL": str(interval), "RXHUBS_BENCH_EXPIRY": str(expiry),
               "RXHUBS_BENCH_CHECKPOINT_INTERVAL": str(checkpoint_s),
               "RXHUBS_BENCH_GC_THRESHOLDS": ",".join(map(str, LARGE_HUB_GC))}
        group = _Group(env, f"scale-{uuid.uuid4().hex[:10]}", Path(tmp), partitions)
        producer = threading.Thread(target=produce, args=(conn, stop, partitions, warm, rate), daemon=True)
        producer.start()
        # the SDK's producer opens a link per partition at its first send to it (half a second each): 16 producers
        # open them side by side (_trickle); start once every partition got its first rounds
        warm.wait(60 + partitions)
        began = time.time()
        try:
            import rxhubs

            hub = rxhubs.EventHub.from_connection_string(conn)
            ns, name = hub.fully_qualified_namespace, hub.eventhub_name
            found = asyncio.run(_measure(group, azurite.connection_string, ns, name, many, few, interval))
            stop.set()
            producer.join(60)
            load = os.getloadavg()[0]

            async def drained() -> tuple[dict[str, int], dict[str, int]]:
                """Wait (bounded) until every partition is checkpointed at its last event; the last events and marks."""
                from rxhubs.stores import BlobCheckpointStore

                try:
                    props = [await hub.get_partition_properties(str(p)) for p in range(partitions)]
                    last = {p.partition_id: p.last_enqueued_sequence_number for p in props}
                    marks: dict[str, int] = {}
                    async with BlobCheckpointStore.from_connection_string(azurite.connection_string,
                                                                          group.container) as store:
                        deadline = time.time() + TIMEOUT_INTERVALS * interval
                        while time.time() < deadline:
                            marks = {c.partition_id: c.sequence_number
                                     for c in await store.list_checkpoints(ns, name, "$Default")}
                            if all(marks.get(pid, -1) >= seq for pid, seq in last.items()):
                                break
                            await asyncio.sleep(interval)
                finally:
                    await hub.close()
                return last, marks

            counts, marks = asyncio.run(drained())
        finally:
            stop.set()
            group.stop(group.live)
        seconds = time.time() - began
        records, processed, by = _ledger(group.folder, list(group.procs), began)
        if keep := os.environ.get("RXHUBS_BENCH_KEEP"):  # a folder: keep each worker's record there
            for owner in group.procs:
                shutil.copy(group.folder / f"{owner}.json", Path(keep) / f"{owner}.json")
    # lost: an event at or below its partition's final checkpoint that nobody processed (skipped for good); an event
    # past it is unread when the run ended (a drain past its bound), and a restarted consumer would read it
    unread = [(pid, seq) for pid, last in counts.items() for seq in range(last + 1) if (pid, seq) not in processed]
    skipped = [(pid, seq) for pid, seq in unread if seq <= marks.get(pid, -1)]
    lost = len(skipped)
    twice = sum(1 for owners in by.values() if len(owners) > 1)
    examples = dict(list(((k, v) for k, v in by.items() if len(v) > 1))[:5])
    moves = [tuple(m) for r in records.values() for m in r.get("moves", ())]
    converged = convergence(found["seen"], moves, interval)
    starts = [change_began for change_began, _ in found["seen"].values()]
    churn = moved_after(found["seen"], moves, [*starts[1:], found["steady"][1]])  # each until the next change
    per_interval = [r["store_calls"] / max(1.0, (seconds - (r["started"] - began)) / interval)
                    for r in records.values()]
    quiet_from, quiet_to = found["steady"]
    steady = [sum(n for second, n in r["per_second"].items() if quiet_from <= int(second) < int(quiet_to))
              / max(1.0, (int(quiet_to) - int(quiet_from)) / interval)
              for owner, r in records.items() if owner in group.live_at_steady]
    extra: dict[str, Any] = {"partitions": partitions, "consumers": f"1 -> {many} -> {few}",
                             "interval_s": interval, "expiry_s": expiry, "checkpoint_s": checkpoint_s,
                             "load_average": round(load, 2)}
    scenario = "scale_real"
    out = [figure(scenario, name, "intervals", value if value is not None else -1.0, None, None,
                  "<= 2 intervals, none moved after", higher_is_better=False,
                  met=value is not None and value <= 2.0 and churn[name] == 0, moved_after_seen=churn[name],
                  seen_converged=None if found["seen"][name][1] is None
                  else round((found["seen"][name][1] - found["seen"][name][0]) / interval, 2), **extra)
           for name, value in converged.items()]
    out.append(figure(scenario, "store_requests_per_interval", "requests", round(max(per_interval), 2), None,
                      "official processor's rule: 1 listing + 1 claim per owned partition per interval, plus "
                      "checkpoint writes", None, higher_is_better=False,
                      median=round(sorted(per_interval)[len(per_interval) // 2], 2),
                      steady=[round(x, 1) for x in steady],
                      official_steady=round(1 + partitions / few + partitions / few * interval / checkpoint_s, 1),
                      **extra))
    out.append(figure(scenario, "memory_per_partition", "KiB", found["memory_per_partition_kib"], None, None, None,
                      higher_is_better=False, rss_kib=found["memory_kib"], **extra))
    out.append(figure(scenario, "cpu_per_partition", "ms/s", round(1000 * found["owner_cpu"] / partitions, 3),
                      None, None, None, higher_is_better=False, owner_cpu_share=round(found["owner_cpu"], 3),
                      steady_cpu_share=found["steady_cpu"], **extra))
    out.append(figure(scenario, "owned_twice", "events", float(twice), None, None, "0", higher_is_better=False,
                      met=twice == 0, examples=examples,
                      changes={k: round(v - began, 2) for k, v in found["changes"].items()}, **extra))
    out.append(figure(scenario, "events_lost", "events", float(lost), None, None, "0", higher_is_better=False,
                      met=lost == 0, processed=sum(processed.values()), sent=sum(c + 1 for c in counts.values()),
                      unread_at_end=len(unread) - lost, lost_examples=skipped[:5],
                      **extra))
    return out
