"""``--timeline=FILE``: when each test ran, on which worker, and how busy the suite kept the CPUs meanwhile.

The suite's wall time on two cores is its CPU divided by two plus the time the CPUs wait: at the end of the run,
when the last long units run alone (a lane of Spark drivers, a test that mostly sleeps), and whenever the running
tests sleep. ``--durations`` and ``--cpu-durations`` rank tests but cannot show that; this writes one JSON line
per test (``{"test", "worker", "start", "stop"}``, seconds since the session started, set-up to tear-down, and
with ``--cpu-durations`` its CPU seconds, ``"cpu"``) and,
every few seconds, one for the whole run (``{"at", "cpu"}``: the CPU seconds the suite's processes had used by
then, the workers' children included), so the schedule's tail and the idle cores can be read from a run:

    make test PYTEST_ARGS='--timeline=/tmp/timeline.jsonl --cpu-durations=60'
    .venv/bin/python -m tests.support.timeline /tmp/timeline.jsonl     # lanes, idle cores, the last to end

(With ``--cpu-durations`` the workers adopt the JVMs pyspark leaves behind, so their CPU is counted too.)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

import psutil
import pytest

_KEY = "timeline"
_CPU_KEY = "cpu_seconds"  # tests/support/cpu_report.py's figure, when --cpu-durations is on
_SAMPLE_SECONDS = 5.0
_START = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--timeline", default=None, metavar="FILE",
        help="write when each test ran, on which worker, and the suite's CPU over time (JSON lines)",
    )


class _Recorder:
    """The controller's side: the file, and a thread sampling the CPU of the suite's process tree."""

    def __init__(self, path: str) -> None:
        self.zero = time.time()
        self.out: TextIO = Path(path).open("w", encoding="utf-8")  # noqa: SIM115 - closed at the session's end
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="timeline", daemon=True)
        self.thread.start()

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    def _sample(self) -> None:
        me = psutil.Process(os.getpid())
        while not self.stop.wait(_SAMPLE_SECONDS):
            total = sum(me.cpu_times()[:4])
            for child in me.children(recursive=True):
                try:
                    total += sum(child.cpu_times()[:4])
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.write({"at": round(time.time() - self.zero, 1), "cpu": round(total, 1)})

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.out.close()


_recorder: _Recorder | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    path = config.getoption("timeline")
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) writes the file
        _recorder = _Recorder(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _recorder
    if _recorder is not None:
        _recorder.close()
        _recorder = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("timeline"):
        item.stash[_START] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    if call.when == "teardown" and _START in item.stash:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        item.user_properties.append((_KEY, [worker, item.stash[_START], time.time()]))
    yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _recorder is None or report.when != "teardown":
        return
    found = dict(report.user_properties)
    if _KEY in found:
        worker, start, stop = found[_KEY]
        record = {"test": report.nodeid, "worker": worker,
                  "start": round(start - _recorder.zero, 1), "stop": round(stop - _recorder.zero, 1)}
        if _CPU_KEY in found:  # with --cpu-durations: the CPU the test used, its processes included
            record["cpu"] = found[_CPU_KEY]
        _recorder.write(record)


def _summary(lines: list[dict[str, Any]], out: TextIO) -> None:
    """Per worker: busy from/to and its longest tests; the CPU used in each minute; the last tests to end."""
    tests = [line for line in lines if "test" in line]
    samples = [line for line in lines if "at" in line]
    end = max(line["stop"] for line in tests)
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in tests:
        by_worker[line["worker"]].append(line)
    out.write(f"{len(tests)} tests, last ended at {end:.0f} s\n")
    for worker, runs in sorted(by_worker.items()):
        runs.sort(key=lambda r: r["start"])
        busy = sum(r["stop"] - r["start"] for r in runs)
        longest = sorted(runs, key=lambda r: r["start"] - r["stop"])[:3]
        out.write(f"{worker}: {len(runs)} tests, {runs[0]['start']:.0f}-{runs[-1]['stop']:.0f} s, busy {busy:.0f} s; "
                  + ", ".join(f"{r['test'].split('::')[-1][:40]} {r['stop'] - r['start']:.0f} s" for r in longest)
                  + "\n")
    previous = {"at": 0.0, "cpu": 0.0}
    out.write("cores busy, per minute: ")
    for sample in samples:
        if sample["at"] - previous["at"] >= 60 or sample is samples[-1]:
            out.write(f"{(sample['cpu'] - previous['cpu']) / (sample['at'] - previous['at']):.2f} ")
            previous = sample
    out.write("\nthe last 12 to end:\n")
    for line in sorted(tests, key=lambda r: -r["stop"])[:12]:
        out.write(f"  {line['start']:6.0f}-{line['stop']:6.0f} s {line['worker']}  {line['test']}\n")


if __name__ == "__main__":
    _summary([json.loads(line) for line in Path(sys.argv[1]).read_text("utf-8").splitlines()], sys.stdout)
