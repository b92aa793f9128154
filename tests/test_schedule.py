"""The suite's schedule (tests/conftest.py): which tests share a worker, and what goes out first.

``make test`` runs on two cores with six workers, so the schedule decides the wall time: the long units must
start first, a JVM's users must share it, and what needs the one package build must come after it is made.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import _AFTER_THE_BUILD, _SECONDS, _needs_spark, _scope, _weight

ROOT = Path(__file__).resolve().parent.parent


def test_every_timed_key_names_a_test_that_exists() -> None:
    # a renamed test loses its time silently and goes out last: the schedule rots one rename at a time
    for key in _SECONDS:
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


def test_the_build_goes_out_among_the_first_and_its_other_user_waits_at_the_end_of_its_lane() -> None:
    units: dict[str, float] = {}
    for key, seconds in _SECONDS.items():
        unit = _scope(ROOT, key if "::" in key else f"{key}::test_x")
        units[unit] = units.get(unit, 0) + seconds
    assert sorted(units.values(), reverse=True).index(units["tests/test_build.py"]) < 6  # six workers
    # in the lane it shares with the Spark examples, the discovery test comes last: the build is made by then
    discovery = _Item(f"{_AFTER_THE_BUILD[0]}::test_a_fresh_session", "spark", "slow")
    examples = [_Item(f"tests/test_examples.py::test_example_runs[{name}]", "spark", "slow")
                for name in ("spark_backfill", "spark_write")]
    lane = {_scope(ROOT, item.nodeid) for item in (discovery, *examples)}
    assert lane == {"Spark drivers: examples, discovery"}
    assert sorted([discovery, *examples], key=_weight)[-1] is discovery


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
