"""The suite's schedule (tests/support/schedule.py): which tests share a worker, and what goes out first.

``make test`` runs on two cores with six workers, so the schedule decides the wall time: the long units must
start first, a JVM's users must share it, and what needs the one package build must come after it is made.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.schedule import _AFTER_THE_BUILD, _SECONDS, _WAITS, Queues, _needs_spark, _scope, _weight

ROOT = Path(__file__).resolve().parent.parent


def test_every_timed_key_names_a_test_that_exists() -> None:
    # a renamed test loses its time silently and goes out last: the schedule rots one rename at a time
    assert not set(_SECONDS) & set(_WAITS)  # a test works or waits, not both
    for key in [*_SECONDS, *_WAITS]:
        module, _, name = key.partition("::")
        path = ROOT / module
        assert path.is_file(), key
        if name:
            function = name.split("[", 1)[0]
            assert re.search(rf"^(async )?def {re.escape(function)}\(", path.read_text("utf-8"), re.MULTILINE), key


def test_the_spark_sessions_users_share_one_worker_and_plain_modules_do_not() -> None:
    lane = [p for p in sorted((ROOT / "tests" / "spark").glob("test_*.py"))
            if _scope(ROOT, f"tests/spark/{p.name}::test_x") == "tests/spark/"]
    uses_the_session = [p for p in (ROOT / "tests" / "spark").glob("test_*.py")
                        if re.search(r"^def test_\w+\([^)]*\bspark: Any", p.read_text("utf-8"), re.MULTILINE)]
    assert uses_the_session and set(uses_the_session) <= set(lane)  # else a worker starts a second session
    plain = ROOT / "tests" / "spark" / "test_arrow_frames.py"  # Arrow builders: no JVM, no reason to queue
    assert not _needs_spark(plain) and _scope(ROOT, "tests/spark/test_arrow_frames.py::test_x") != "tests/spark/"


class _Item:
    """What :func:`_weight` reads of a collected test."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid, self._marks = nodeid, marks

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self._marks else None


def _hand_out(units: dict[str, dict[str, bool]], workers: int, count: int) -> list[str]:
    """The first ``count`` units the scheduler hands out, no unit finished meanwhile."""
    queues, given, waiting = Queues(units), [], 0
    for _ in range(count):
        given.append(queues.pop(waiting, workers, given))
        waiting += given[-1] in queues.waiting
    return given


def test_the_build_and_the_three_spark_lanes_go_out_first_and_the_builds_other_user_waits_at_the_end_of_its_lane(
) -> None:
    units: dict[str, dict[str, bool]] = {}
    for key in [*_SECONDS, *_WAITS]:
        nodeid = key if "::" in key else f"{key}::test_x"
        units.setdefault(_scope(ROOT, nodeid), {})[nodeid] = False
    first = _hand_out(units, 6, 6)  # six workers
    assert {"tests/test_build.py", "tests/spark/", "Spark drivers: bench", "Spark drivers: examples, discovery"} <= set(
        first)
    assert 1 <= sum(unit in Queues(units).waiting for unit in first) <= 2  # the rest: the longest units that wait
    # in the lane it shares with the Spark examples, the discovery test comes last: the build is made by then
    discovery = _Item(f"{_AFTER_THE_BUILD[0]}::test_a_fresh_session", "spark", "slow")
    examples = [_Item(f"tests/test_examples.py::test_example_runs[{name}]", "spark", "slow")
                for name in ("spark_backfill", "spark_write")]
    lane = {_scope(ROOT, item.nodeid) for item in (discovery, *examples)}
    assert lane == {"Spark drivers: examples, discovery"}
    assert sorted([discovery, *examples], key=_weight)[-1] is discovery


def test_units_that_wait_go_to_their_share_of_the_workers_beside_those_that_work() -> None:
    # seconds: the waiting units 100 + 60 + 40 = 200 of 600 not finished; a third of three workers: 1
    waits = {f"tests/faults/test_w.py::test_{n}": s for n, s in (("a", 100), ("b", 60), ("c", 40))}
    works = {f"tests/faults/test_k.py::test_{n}": s for n, s in (("a", 300), ("b", 80), ("c", 20))}
    units = {nodeid: {nodeid: False} for nodeid in [*waits, *works]}
    original = dict(_WAITS), dict(_SECONDS)
    _WAITS.update(waits)
    _SECONDS.update(works)
    try:
        queues = Queues(units)
        assert queues.waiting == set(waits) and queues.share(3) == 1
        assert queues.pop(0, 3) == "tests/faults/test_w.py::test_a"  # the longest that waits: none waits yet
        assert queues.pop(1, 3, ["tests/faults/test_w.py::test_a"]) == "tests/faults/test_k.py::test_a"
        running = ["tests/faults/test_w.py::test_a", "tests/faults/test_k.py::test_a"]
        assert queues.pop(1, 3, running) == "tests/faults/test_k.py::test_b"  # its share is held
        # the waiting worker's unit is done: its share is free again; then works run out, and waits go to anyone
        assert queues.pop(0, 3, running[1:]) == "tests/faults/test_w.py::test_b"
        assert queues.pop(1, 3, running[1:]) == "tests/faults/test_k.py::test_c"
        assert queues.pop(1, 3, running[1:]) == "tests/faults/test_w.py::test_c" and len(queues) == 0
    finally:
        _WAITS.clear()
        _WAITS.update(original[0])
        _SECONDS.clear()
        _SECONDS.update(original[1])


def test_the_three_spark_lanes_take_about_as_long_each() -> None:
    # each lane runs on one worker, one test after the other: the longest is the suite's floor. The session's users
    # with the Connect and cluster tests among them took 1.9 times the bench's lane
    lanes: dict[str, float] = {}
    for key, seconds in _SECONDS.items():
        unit = _scope(ROOT, key if "::" in key else f"{key}::test_x")
        if unit in ("tests/spark/", "Spark drivers: bench", "Spark drivers: examples, discovery"):
            lanes[unit] = lanes.get(unit, 0) + seconds
    assert len(lanes) == 3 and max(lanes.values()) < 1.4 * min(lanes.values()), lanes
    for module in ("tests/spark/test_connect.py", "tests/spark/test_cluster.py"):  # no session, JVMs of their own
        assert not re.search(r"\bspark: Any", (ROOT / module).read_text("utf-8"))
        assert _scope(ROOT, f"{module}::test_x") == "Spark drivers: bench"


def test_the_timeline_shows_each_workers_span_and_the_last_tests_to_end() -> None:
    import io

    from tests.support.timeline import _summary

    lines = [{"test": "tests/a.py::test_long", "worker": "gw0", "start": 1.0, "stop": 90.0},
             {"test": "tests/b.py::test_short", "worker": "gw1", "start": 1.0, "stop": 3.0},
             {"at": 60.0, "cpu": 90.0}, {"at": 90.0, "cpu": 100.0}]
    out = io.StringIO()
    _summary(lines, out)
    text = out.getvalue()
    assert "last ended at 90 s" in text and "gw0: 1 tests, 1-90 s, busy 89 s" in text
    assert "cores busy, per minute: 1.50 0.33" in text  # 90 CPU seconds in the first minute, 10 in the next 30 s
    assert text.index("tests/a.py::test_long") < text.index("tests/b.py::test_short")  # the last to end first


def test_a_worker_that_crashes_loses_its_test_and_the_run_goes_on_to_the_end(tmp_path: Path) -> None:
    # a test that kills its worker: xdist reports it failed and starts another worker; the run must end with
    # every other test run once (pytest-xdist's own remove_node handed the finished units out again: a hang)
    (tmp_path / "conftest.py").write_text(
        "from tests.support.schedule import scheduler\n\n"
        "def pytest_xdist_make_scheduler(config, log):\n"
        "    return scheduler(config, log)\n"
    )
    (tmp_path / "test_many.py").write_text(
        "import os, pathlib\n\n"
        "def record(name):\n"
        "    with open(pathlib.Path(__file__).with_name('ran.txt'), 'a') as f:\n"
        "        f.write(name + '\\n')\n\n"
        + "".join(f"def test_{i}():\n    record('{i}')\n\n" for i in range(12))
        + "def test_crash():\n    record('crash')\n    os._exit(3)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=600,  # a hang guard, not a speed limit: the run takes seconds
    )
    assert "1 failed, 12 passed" in run.stdout, run.stdout[-2000:]
    assert "crashed while running 'test_many.py::test_crash'" in run.stdout
    ran = (tmp_path / "ran.txt").read_text().split()
    assert sorted(ran) == sorted([*map(str, range(12)), "crash"])  # each once, the crashing one not again
