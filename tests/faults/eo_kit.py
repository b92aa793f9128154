"""The exactly-once kill test's parts: a producer with ids, the fleet of consumer processes and its seeded faults,
the ledger read back from the hub, the tables read back, and the comparison of the two.

The ledger is what the hub holds (every partition read from the start: ``(partition, sequence number) -> id``),
not what the producer sent, so a publisher's retry (a new sequence number for the same id) is not counted as a
consumer's duplicate. A table is compared with it as a multiset of ``(partition, sequence number)``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.eo_hooks import pause_request
from tests.faults.eo_worker import CONTROL_GROUP, EO_GROUP, EXPIRY, INTERVAL

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def wait_for(condition: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds passed; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


class Producer(threading.Thread):
    """Sends small batches to every partition until stopped, each event's body ``{"id", "p"}`` with a unique id."""

    def __init__(self, connection_string: str, per_round: int = 5, pause: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.per_round, self.pause = per_round, pause
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                while not self.stop.is_set():
                    for pid in map(str, range(PARTITIONS)):
                        batch = producer.create_batch(partition_id=pid)
                        for _ in range(self.per_round):
                            batch.add(EventData(json.dumps({"id": f"e{self.sent}", "p": pid})))
                            self.sent += 1
                        producer.send_batch(batch)
                    time.sleep(self.pause)
        except BaseException as exc:  # reported by the test
            self.error = exc


async def _read_hub(connection_string: str) -> dict[tuple[str, int], str]:
    import rxhubs
    from rxhubs import Position

    held: dict[tuple[str, int], str] = {}
    async with rxhubs.EventHub.from_connection_string(connection_string) as hub:
        for pid in map(str, range(PARTITIONS)):
            props = await hub.get_partition_properties(pid)
            last = props.last_enqueued_sequence_number
            if props.is_empty or last is None or last < 0:
                continue
            async with hub.receiver(pid, consumer_group="verify", start=Position.earliest(),
                                    owner_level=None) as receiver:
                got, empty = -1, 0
                while got < last:
                    batch = await receiver.receive_batch(500, 2.0)
                    empty = 0 if batch else empty + 1
                    assert empty < 15, f"partition {pid}: nothing for 30 s after {got}, the hub says {last}"
                    for event in batch:
                        got = event.sequence_number
                        held[(pid, got)] = json.loads(event.body)["id"]
    return held


def hub_ledger(connection_string: str) -> dict[tuple[str, int], str]:
    """What the hub holds: every partition read from the start, ``(partition, sequence number) -> id``."""
    return asyncio.run(_read_hub(connection_string))


def _body_id(body: Any) -> str | None:
    try:
        return str(json.loads(body)["id"])
    except (ValueError, TypeError, KeyError):
        return None


def read_control(folder: Path) -> list[tuple[str, int, str | None]]:
    """The control's rows, every incarnation's file (a line torn by a kill -9 is not a row)."""
    rows = []
    for path in sorted(folder.glob("control-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            rows.append((record["partition"], int(record["sequenceNumber"]), _body_id(record["body"])))
    return rows


def owners(store: Path, group: str) -> dict[str, str]:
    """Partition -> owner, of the ownership records of ``group`` renewed within the expiry."""
    try:
        with sqlite3.connect(store) as con:
            rows = con.execute(
                "SELECT partition_id, owner_id, last_modified_time FROM rxhubs_ownership WHERE consumer_group = ?",
                (group.lower(),),
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy
        return {}
    now = time.time()
    return {pid: owner for pid, owner, at in rows if owner and now - float(at) < EXPIRY}


@dataclass
class Comparison:
    """A table against the ledger."""

    rows: int
    lost: list[tuple[str, int]]
    phantoms: list[tuple[str, int]]
    duplicates: int  # rows beyond the first of each (partition, sequence number)
    wrong_ids: list[tuple[str, int]]

    def summary(self) -> str:
        return (f"rows={self.rows} lost={len(self.lost)} {self.lost[:5]} phantoms={len(self.phantoms)} "
                f"{self.phantoms[:5]} duplicates={self.duplicates} "
                f"wrong ids={len(self.wrong_ids)} {self.wrong_ids[:5]}")


def compare(ledger: dict[tuple[str, int], str], rows: Iterable[tuple[str, int, str | None]]) -> Comparison:
    """Count, duplicates (GROUP BY partition, seq HAVING count > 1) and the anti-join both ways."""
    rows = list(rows)
    counts = Counter((p, s) for p, s, _ in rows)
    return Comparison(
        rows=len(rows),
        lost=sorted(set(ledger) - set(counts)),
        phantoms=sorted(set(counts) - set(ledger)),
        duplicates=sum(n - 1 for n in counts.values()),
        wrong_ids=sorted({(p, s) for p, s, i in rows if (p, s) in ledger and ledger[(p, s)] != i}),
    )


@dataclass
class Fleet:
    """Consumer processes in slots (``a``, ``b``, ``c``); each start is a new incarnation, a new owner id."""

    folder: Path
    sinks: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    incarnations: Counter[str] = field(default_factory=Counter)
    actions: list[tuple[float, str, str]] = field(default_factory=list)  # (time, action, owner)
    stopped: set[str] = field(default_factory=set)  # owners stopped on purpose (kill, term)
    hooked: set[str] = field(default_factory=set)  # owners started with the kill hook

    @property
    def group(self) -> str:
        """The consumer group the schedule watches: the exactly-once sink's, or the control's when alone."""
        return CONTROL_GROUP if self.sinks == "jsonl" else EO_GROUP

    def start(self, slot: str, kill_at: int | None = None) -> None:
        self.incarnations[slot] += 1
        owner = f"{slot}{self.incarnations[slot]}"
        extra = {"RXHUBS_TEST_KILL_AT": f"after_write:{kill_at}"} if kill_at else {}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.eo_worker", owner, str(self.folder), self.sinks],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "RXHUBS_TEST_FOLDER": str(self.folder), **self.env, **extra},
            stdout=subprocess.PIPE, stderr=open(self.folder / f"{owner}.err", "w"),  # noqa: SIM115 - kept by the child
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", (self.folder / f"{owner}.err").read_text()[-3000:]
        self.procs[slot], self.owner[slot] = proc, owner
        if kill_at:
            self.hooked.add(owner)
        self.actions.append((time.time(), "start" if not kill_at else f"start-hook@{kill_at}", owner))

    def signal(self, slot: str, sig: signal.Signals, action: str) -> None:
        self.procs[slot].send_signal(sig)
        self.actions.append((time.time(), action, self.owner[slot]))
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.stopped.add(self.owner[slot])

    def stop(self, slot: str, sig: signal.Signals) -> int:
        self.signal(slot, sig, "kill" if sig == signal.SIGKILL else "term")
        return self._wait(slot)

    def _wait(self, slot: str, timeout: float = 30.0) -> int:
        """The exit code of a process asked to stop.

        One that has not stopped ``timeout`` seconds after SIGTERM is a defect (a consumer that hangs at shutdown):
        it dumps its threads' stacks into its ``.err``, is killed, and the test fails with the end of that file.
        """
        proc = self.procs[slot]
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            proc.kill()
            proc.wait()
            err = (self.folder / f"{self.owner[slot]}.err").read_text()
            raise AssertionError(f"{self.owner[slot]} did not stop within {timeout} s of SIGTERM:\n{err[-6000:]}"
                                 ) from None

    def stop_gracefully(self, slot: str) -> int:
        """SIGTERM, the exit code (not counted as a fault: the end of the run)."""
        self.procs[slot].send_signal(signal.SIGTERM)
        self.stopped.add(self.owner[slot])
        return self._wait(slot)

    def running(self) -> list[str]:
        return [slot for slot, proc in self.procs.items() if proc.poll() is None]

    def restart_the_dead(self, kill_at: Callable[[], int | None] = lambda: None) -> list[str]:
        """Start a new incarnation in each slot whose process died on its own (the hook); their owners."""
        dead = [s for s, p in self.procs.items() if p.poll() is not None and self.owner[s] not in self.stopped]
        for slot in dead:
            self.actions.append((time.time(), "died", self.owner[slot]))
            self.stopped.add(self.owner[slot])
            self.start(slot, kill_at())
        return dead

    def log(self, kind: str) -> list[tuple[str, list[str]]]:
        """Every ``kind`` line of every incarnation's log: (owner, fields)."""
        found = []
        for path in sorted(self.folder.glob("*.log")):
            for line in path.read_text().splitlines():
                if line.startswith(kind + " "):
                    found.append((path.stem, line.split()[1:]))
        return found

    def died_inside(self) -> list[list[str]]:
        """The hook's kills that landed with the rows written and the commit not made (the HOOK lines' fields).

        For Delta, the data file the watcher saw must be absent from the table's log: a kill that came after the
        log entry got in does not count (nor do ``-committed`` kills, after the commit by design).
        """
        kind = self.sinks.split(",")[-1]
        inside = [f for _, f in self.log("HOOK") if f[0] == kind]
        if kind == "delta" and inside:
            referenced = delta_files_in_table(self.folder)
            inside = [f for f in inside if f[1] not in referenced]
        return inside

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def _taken_over(fleet: Fleet, paused: str, partitions: list[str], since: float) -> bool:
    """True once other owners have committed rows of each of ``partitions`` since ``since`` (COMMIT lines)."""
    committed = set()
    for owner, fields in fleet.log("COMMIT"):
        if owner != paused and float(fields[0]) > since:
            committed |= {pid for pid, written, _ in (item.split(":") for item in fields[2:]) if int(written) > 0}
    return set(partitions) <= committed


def _pause_at_a_commit(fleet: Fleet, slot: str, timeout: float = 60.0) -> None:
    """Have ``slot`` stop itself (SIGSTOP) as its next commit holding rows begins, and wait until it has stopped.

    A SIGSTOP from outside at a chosen moment found the consumer between commits now and then (nothing held, so
    no zombie commit to fence off once resumed: the fence was never felt); stopping at the commit makes it certain.
    """
    pid = fleet.procs[slot].pid
    pause_request(fleet.folder, pid).touch()
    assert wait_for(lambda: _stopped(pid), timeout), f"{fleet.owner[slot]} did not reach a commit with rows"
    fleet.actions.append((time.time(), "pause", fleet.owner[slot]))


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def chaos(fleet: Fleet, seed: int, steps: int = 6) -> dict[str, Any]:
    """The seeded fault schedule; returns what was done (``kills``, ``terms``, ``paused`` owner and its partitions).

    Slots ``a`` and ``b`` run from the start, ``c`` joins (a handover); then ``steps`` random disruptions a second
    or two apart: a kill -9 or a graceful stop of a random consumer, restarted shortly after as a new owner (some
    incarnations carry the kill hook: they die on their own between a write and its commit, and are restarted),
    and once, the consumer owning the most partitions is paused (SIGSTOP) past its ownership expiry while the
    others take its partitions over, then resumed (SIGCONT) as a zombie.
    """
    rng = random.Random(seed)

    def hook() -> int | None:  # until one died inside a write (not after it), every new one carries it
        return rng.randint(1, 4) if not fleet.died_inside() else rng.choice([None, rng.randint(1, 6)])

    store = fleet.folder / "store.sqlite"
    fleet.start("a", hook())
    fleet.start("b")
    assert wait_for(lambda: len(owners(store, fleet.group)) == PARTITIONS, 30)
    time.sleep(rng.uniform(0.5, 1.5))
    fleet.start("c", hook())
    plan = ["kill", "kill", "term", "pause", *rng.choices(["kill", "term"], k=max(0, steps - 4))]
    rng.shuffle(plan)
    done: dict[str, Any] = {"kills": 0, "terms": 0, "paused": None, "paused_partitions": []}
    for action in plan:
        time.sleep(rng.uniform(0.8, 2.0))
        fleet.restart_the_dead(hook)
        if action == "pause":
            slot, by = _busiest(fleet, store, hook)
            done["paused"], done["paused_partitions"] = fleet.owner[slot], sorted(by.get(fleet.owner[slot], []))
            if fleet.group == EO_GROUP:  # it stops itself as a commit holding rows is about to begin
                _pause_at_a_commit(fleet, slot)
            else:
                fleet.signal(slot, signal.SIGSTOP, "pause")
            paused_at = time.time()
            # what it owns as it stops (the listing above can be a moment old: a partition handed to it meanwhile)
            held = sorted({*done["paused_partitions"], *(p for p, o in owners(store, fleet.group).items()
                                                         if o == done["paused"])})
            time.sleep(EXPIRY + 4 * INTERVAL)  # its records expire and the others take its partitions
            if fleet.group == EO_GROUP:  # and commit them: on a loaded machine the takeover can come later
                wait_for(functools.partial(_taken_over, fleet, done["paused"], held, paused_at), 60)
            fleet.signal(slot, signal.SIGCONT, "resume")
            continue
        slot = rng.choice(fleet.running())
        fleet.stop(slot, signal.SIGKILL if action == "kill" else signal.SIGTERM)
        done["kills" if action == "kill" else "terms"] += 1
        time.sleep(rng.uniform(0.2, 1.2))
        fleet.start(slot, hook())
    fleet.restart_the_dead(hook)
    return done


def _busiest(fleet: Fleet, store: Path, hook: Callable[[], int | None], timeout: float = 60.0
             ) -> tuple[str, dict[str, list[str]]]:
    """The running consumer owning the most partitions, and who owns what, preferring one free of the kill hook.

    Waits (up to ``timeout``) until that consumer owns at least one partition: on a loaded machine the consumers
    free of the hook may have just restarted and own nothing yet, and a zombie with nothing to lose tests
    nothing. Then any running consumer that owns some will do.
    """
    deadline = time.monotonic() + timeout
    while True:
        by: dict[str, list[str]] = defaultdict(list)
        for pid, owner in owners(store, fleet.group).items():
            by[owner].append(pid)
        running = fleet.running()
        late = time.monotonic() > deadline
        for candidates in ([s for s in running if fleet.owner[s] not in fleet.hooked], *([running] if late else [])):
            if candidates:
                slot = max(candidates, key=lambda s: len(by.get(fleet.owner[s], [])))
                if by.get(fleet.owner[slot]) or (late and candidates is running):
                    return slot, by
        time.sleep(0.5)
        fleet.restart_the_dead(hook)


def drain(fleet: Fleet, complete: Callable[[], bool], timeout: float = 90.0) -> bool:
    """Keep the consumers running (restarting any the hook killed, without the hook now) until ``complete``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fleet.restart_the_dead()
        if complete():
            return True
        time.sleep(0.5)
    return complete()


def _contexts(connection_string: str) -> list[Any]:
    import rxhubs

    hub = rxhubs.EventHub.from_connection_string(connection_string)
    return [rxhubs.PartitionContext(hub.fully_qualified_namespace, hub.eventhub_name, EO_GROUP, str(p))
            for p in range(PARTITIONS)]


def open_table(kind: str, folder: Path) -> Any:
    """The exactly-once table the workers wrote, opened with the public sink (to read its positions)."""
    from rxhubs import tables

    return tables.SqliteSink(folder / "table.sqlite") if kind == "sqlite" else tables.DeltaSink(folder / "delta")


def table_positions(kind: str, folder: Path, connection_string: str) -> dict[str, int | None]:
    """Each partition's position in the table, as the sink reports it to a new owner."""
    return dict(asyncio.run(open_table(kind, folder).positions(_contexts(connection_string))))


def read_table(kind: str, folder: Path) -> list[tuple[str, int, str | None]]:
    """The exactly-once table's rows: (partition, sequence number, id from the body)."""
    if kind == "sqlite":
        path = folder / "table.sqlite"
        if not path.exists():
            return []
        with sqlite3.connect(path) as con:
            try:
                rows = con.execute('SELECT "partition", "sequenceNumber", body FROM rxhubs_events').fetchall()
            except sqlite3.OperationalError:  # not created yet
                return []
        return [(str(p), int(s), _body_id(b)) for p, s, b in rows]
    import deltalake

    if not deltalake.DeltaTable.is_deltatable(str(folder / "delta")):
        return []
    from rxhubs.tables import read_delta

    table = read_delta(folder / "delta", ["partition", "sequenceNumber", "body"])
    return [(str(p), int(s), _body_id(b)) for p, s, b in zip(*(table.column(c).to_pylist() for c in table.column_names),
                                                              strict=True)]


def delta_files_in_table(folder: Path) -> set[str]:
    """The data files the Delta table's log references (a file written by a commit that never got in is not)."""
    import deltalake

    return {Path(uri).name for uri in deltalake.DeltaTable(str(folder / "delta")).file_uris()}
