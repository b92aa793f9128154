"""A streaming query starts on a loaded machine: the streaming-source runner connects back before its imports.

Spark gives the process that runs a Python streaming source's driver side 10 s, fixed, to connect back to the
JVM; the runner used to connect only after importing pyspark, pyarrow and numpy. Under ``make test`` on two
cores that took longer, and queries failed with "Python worker failed to connect back".
``rxhubs.spark.local_session`` makes ``_worker_python.sh`` Spark's Python, which starts that runner through
``_worker_start.py``: stdlib only, it connects and authenticates first. Here the load is a throttle that lets
each runner run 1 ms in every 100 ms for its first 120 such cycles, 12 s or more (SIGSTOP/SIGCONT), about
what a process gets at a load of 100 on one core; the handshake is also checked against a stand-in for the JVM.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import rxhubs.spark
from rxhubs.emulator import BackgroundEmulator
from rxhubs.spark._session import worker_python
from rxhubs.spark._worker_start import RUNNER, connect_back
from tests.spark.test_source import expected, run_query, send, written

pytestmark = pytest.mark.spark

HUB = "hub"


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    return started


class Throttle:
    """Each streaming-source runner this process's Spark starts gets ``run`` s in every ``period`` s, ``hold`` times.

    ``cycles`` counts, per runner pid, the times it was stopped: the load it felt.
    """

    def __init__(self, run: float = 0.001, period: float = 0.1, hold: int = 120) -> None:
        self.run, self.period, self.hold = run, period, hold
        self.cycles: Counter[int] = Counter()
        self._found: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="throttle", daemon=True)

    def __enter__(self) -> Throttle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _look(self) -> None:
        for child in psutil.Process().children(recursive=True):
            if child.pid not in self._found:
                try:
                    if RUNNER in child.cmdline():
                        self._found[child.pid] = child
                except psutil.Error:
                    continue

    def _signal(self, procs: list[psutil.Process], sig: int) -> None:
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._look()
            held = [proc for pid, proc in self._found.items() if self.cycles[pid] < self.hold]
            self._signal(held, signal.SIGSTOP)
            self.cycles.update(proc.pid for proc in held)
            time.sleep(self.period - self.run)
            self._signal(held, signal.SIGCONT)
            time.sleep(self.run)
        self._signal(list(self._found.values()), signal.SIGCONT)


@pytest.mark.timeout(300)  # setup included: a first SparkSession under load took 71 s here
def test_a_streaming_query_starts_while_its_runner_gets_one_percent_of_a_cpu(
    spark: Any, emulator: BackgroundEmulator, tmp_path: Path
) -> None:
    assert os.environ["PYSPARK_PYTHON"] == worker_python(), "PYSPARK_PYTHON was set before local_session ran"
    rxhubs.spark.register_source(spark)
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 40, "t")
    with Throttle() as throttle:
        run_query(spark, conn_str, tmp_path)
    assert written(spark, tmp_path) == expected(("t", 40))
    # the runner was held to 1 % for 120 cycles (past the JVM's 10 s), and still connected back
    assert throttle.cycles and max(throttle.cycles.values()) == throttle.hold


def _jvm(reply: bytes, seen: dict[str, Any]) -> tuple[socket.socket, threading.Thread]:
    """A stand-in for PythonWorkerFactory and SocketAuthHelper: accept, read the secret, reply, read the pid."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            (length,) = struct.unpack("!i", stream.read(4))
            seen["secret"] = stream.read(length).decode()
            stream.write(struct.pack("!i", len(reply)) + reply)
            stream.flush()
            data = stream.read(4)
            seen["pid"] = struct.unpack("!i", data)[0] if len(data) == 4 else None

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("PYTHON_WORKER_FACTORY_SOCK_PATH", "SPARK_PREFER_IPV6"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "s3cret")
    yield


def test_the_handshake_is_sparks_secret_then_pid(worker_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    server, thread = _jvm(b"ok", seen)
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_PORT", str(server.getsockname()[1]))
    stream, sock = connect_back()
    thread.join(30)
    stream.close()
    sock.close()
    server.close()
    assert seen == {"secret": "s3cret", "pid": os.getpid()}
    assert sock.gettimeout() is None  # the runner waits on the JVM without a deadline


def test_a_refused_secret_is_an_error_and_no_pid_is_sent(worker_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    server, thread = _jvm(b"err", seen)
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_PORT", str(server.getsockname()[1]))
    with pytest.raises(ConnectionError, match="refused"):
        connect_back()
    thread.join(30)
    server.close()
    assert seen == {"secret": "s3cret", "pid": None}


@pytest.mark.timeout(400)
def test_a_users_own_session_given_worker_python_starts_a_streaming_query_under_the_same_load(
    emulator: BackgroundEmulator, tmp_path: Path
) -> None:
    """docs/spark.md, "Your own SparkSession": a driver that builds its session itself, with the documented lines.

    (With ``plain``, the driver's interpreter as PYSPARK_PYTHON, the same run fails with "Python worker failed to
    connect back": the limit this guards against.)
    """
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 40, "t")
    driver = Path(__file__).with_name("_own_session_driver.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "RXHUBS_SPARK_PYTHON")}
    env.update(RXHUBS_TEST_CONNECTION_STRING=conn_str, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    with Throttle() as throttle:
        done = subprocess.run(
            [sys.executable, str(driver), "wrapper", str(tmp_path / "chk"), str(tmp_path / "out")],
            capture_output=True, text=True, timeout=360, env=env, cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 80" in done.stdout.splitlines(), (done.stdout, done.stderr[-2000:])
    assert throttle.cycles and max(throttle.cycles.values()) == throttle.hold  # the runner was held past 10 s
