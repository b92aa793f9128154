"""Where a Spark source query's time goes: ``python -m rxhubs.bench._spark_profile [--events N] [--repeat R]``.

The ``spark-source`` benchmark's hub (an emulator in its own process, 4 partitions, JSON events of about 100
bytes), read the way the benchmark reads it: the streaming query into ``noop`` (availableNow, the documented
defaults) and the batch read (``count()``), on ``local[2]``, after a warm-up of each. Every Python process of the
queries writes timed marks (:mod:`rxhubs.spark._trace`); Spark's own per-micro-batch phases come from the
query's progress (``durationMs``). Prints one JSON object per query, then a summary per kind, in seconds:

- ``total``: the query, from ``start()`` (or the action) to its end;
- ``before_first_trigger`` (stream): the query's start: Spark starting the streaming runner (a new Python
  process), its imports, ``initialOffset`` and ``prepareForTriggerAvailableNow`` (``management``: the hub's
  management calls inside them);
- ``micro_batches`` (stream): Spark's ``durationMs`` of each (``latestOffset``, ``walCommit``, ``queryPlanning``,
  ``addBatch``: the tasks, ``commitOffsets``);
- ``after_last_trigger`` (stream): from the last micro-batch's end to the query's end (``stop``);
- ``tasks``: per read task, its start relative to the query, ``first`` (connect, authenticate, attach, first
  frames), ``read``, ``spark`` (Spark holding the generator), ``close``, rows, CPU us per event, and
  ``worker_task`` (1 = the first task in a new Python worker, which pays for its imports: ``worker_age``).

The machine's load average is printed beside it: read the figures as proportions on a loaded machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._spark_source import HUB, PARTITIONS, _prefill
from rxhubs.spark._trace import ENV


def _marks(path: Path, since: float, until: float) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [m for m in lines if since <= m.get("t0", m["t"]) <= until]


def _when(text: str) -> float:
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _tasks(marks: list[dict[str, Any]], origin: float) -> list[dict[str, Any]]:
    out = []
    for m in marks:
        if m["what"] != "task":
            continue
        rows = max(1, int(m["rows"]))
        out.append({
            "partition": m["partition"], "rows": m["rows"], "at": round(m["t0"] - origin, 3), "s": round(m["s"], 3),
            "first": round(m["first"], 3), "read": round(m["s"] - m["first"] - m["spark"] - m["close"], 3),
            "spark": round(m["spark"], 3), "close": round(m["close"], 3),
            "cpu_us_per_event": round(m["cpu"] / rows * 1e6, 2), "worker_task": m["worker_task"],
            "worker_age": round(m["t0"] - m["worker_started"], 3) if m.get("worker_started") else None,
        })
    return out


def _stages(spark: Any, since: float, until: float) -> list[dict[str, Any]]:
    """Spark's own record of the stages (and their tasks) submitted between ``since`` and ``until``."""
    jvm = spark.sparkContext._jvm
    store = spark.sparkContext._jsc.sc().statusStore()
    empty = jvm.java.util.ArrayList
    stages = store.stageList(empty(), False, False, spark.sparkContext._gateway.new_array(jvm.double, 0), empty())
    out = []
    for i in range(stages.size()):
        stage = stages.apply(i)
        submitted = stage.submissionTime()
        if submitted.isEmpty() or not since <= submitted.get().getTime() / 1e3 <= until:
            continue
        tasks = store.taskList(stage.stageId(), stage.attemptId(), 1000)
        rows = []
        for j in range(tasks.size()):
            task = tasks.apply(j)
            metrics = task.taskMetrics().get() if task.taskMetrics().isDefined() else None
            rows.append({
                "launch": round(task.launchTime().getTime() / 1e3 - since, 3),
                "s": task.duration().get() / 1e3 if task.duration().isDefined() else None,
                "deserialize": metrics.executorDeserializeTime() / 1e3 if metrics else None,
                "run": metrics.executorRunTime() / 1e3 if metrics else None,
                "scheduler_delay": task.schedulerDelay() / 1e3,
            })
        done = stage.completionTime()
        out.append({"stage": stage.stageId(), "name": stage.name()[:40],
                    "submitted": round(submitted.get().getTime() / 1e3 - since, 3),
                    "completed": round(done.get().getTime() / 1e3 - since, 3) if done.isDefined() else None,
                    "tasks": sorted(rows, key=lambda r: r["launch"])})
    return sorted(out, key=lambda s: s["submitted"])


def _sum(marks: list[dict[str, Any]], what: str) -> float:
    return round(float(sum(m["s"] for m in marks if m["what"] == what)), 3)


def stream(spark: Any, conn: str, root: Path, trace: Path, expected: int) -> dict[str, Any]:
    """One availableNow query into ``noop`` with the documented defaults; its breakdown."""
    query = (spark.readStream.format("eventhubs").option("connectionString", conn)
             .option("startingPosition", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", str(root)).trigger(availableNow=True))
    origin, start = time.time(), time.perf_counter()
    running = query.start()
    running.awaitTermination()
    total = time.perf_counter() - start
    progress = running.recentProgress
    if sum(int(p["numInputRows"]) for p in progress) != expected:
        raise RuntimeError("spark profile: the stream did not read every event")
    marks = _marks(trace, origin, origin + total)
    first = _when(progress[0]["timestamp"]) - origin
    last = progress[-1]
    last_end = _when(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1e3 - origin
    starts = [m for m in marks if m["what"] == "management" and m.get("driver_started")]
    return {
        "kind": "stream", "events": expected, "total": round(total, 3), "before_first_trigger": round(first, 3),
        "runner_started_at": round(starts[0]["driver_started"] - origin, 3) if starts else None,
        "initialOffset": _sum(marks, "initialOffset"),
        "prepareForTriggerAvailableNow": _sum(marks, "prepareForTriggerAvailableNow"),
        "management": _sum(marks, "management"), "management_calls": sum(m["what"] == "management" for m in marks),
        "micro_batches": [{"rows": p["numInputRows"], **{k: v / 1e3 for k, v in p["durationMs"].items()}}
                          for p in progress],
        "after_last_trigger": round(total - last_end, 3), "stop": _sum(marks, "stop"),
        "first_driver_call_at": round(min((m.get("t0", m["t"]) for m in marks), default=origin) - origin, 3),
        "tasks": _tasks(marks, origin), "stages": _stages(spark, origin, origin + total),
    }


def batch(spark: Any, conn: str, trace: Path, expected: int) -> dict[str, Any]:
    """One batch read of the whole hub, counted; its breakdown."""
    origin, start = time.time(), time.perf_counter()
    rows = spark.read.format("eventhubs").option("connectionString", conn).load().count()
    total = time.perf_counter() - start
    if rows != expected:
        raise RuntimeError("spark profile: the batch read did not read every event")
    marks = _marks(trace, origin, origin + total)
    return {"kind": "batch", "events": expected, "total": round(total, 3), "plan": _sum(marks, "plan"),
            "management": _sum(marks, "management"), "tasks": _tasks(marks, origin),
            "stages": _stages(spark, origin, origin + total)}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("stream", "batch"):
        mine = [r for r in runs if r["kind"] == kind]
        if not mine:
            continue
        tasks = [t for r in mine for t in r["tasks"]]
        keys = ["total", "before_first_trigger", "management", "after_last_trigger", "plan"]
        row = {k: statistics.median(r[k] for r in mine) for k in keys if k in mine[0]}
        if kind == "stream":
            row["addBatch"] = statistics.median(sum(b.get("addBatch", 0) for b in r["micro_batches"]) for r in mine)
            row["micro_batch_other"] = statistics.median(
                sum(b["triggerExecution"] - b.get("addBatch", 0) for b in r["micro_batches"]) for r in mine)
        for k in ("first", "read", "close", "cpu_us_per_event"):
            row[f"task_{k}_median"] = statistics.median(t[k] for t in tasks) if tasks else None
        row["tasks_in_new_workers"] = sum(t["worker_task"] == 1 for t in tasks)
        row["tasks"] = len(tasks)
        out[kind] = row
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rxhubs-spark-profile-"))
    trace = root / "trace.jsonl"
    os.environ[ENV] = str(trace)  # before the session: Spark's Python processes inherit it
    from rxhubs.spark import local_session, register_source

    spark = local_session(master="local[2]", app_name="rxhubs-spark-profile")
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    runs: list[dict[str, Any]] = []
    try:
        with emulator_process({HUB: PARTITIONS}) as conns:
            conn = conns[HUB]
            _prefill(conn, args.events)
            stream(spark, conn, root / "warm", trace, args.events)
            batch(spark, conn, trace, args.events)
            for i in range(args.repeat):
                runs.append(stream(spark, conn, root / f"chk-{i}", trace, args.events))
                runs.append(batch(spark, conn, trace, args.events))
        for run in runs:
            print(json.dumps(run), flush=True)
        print(json.dumps({"summary": _summary(runs), "load_average": os.getloadavg()}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
