"""A standalone Spark cluster on loopback (a master and a worker, each its own JVM): the batch read and the write
run in an executor JVM that the worker starts, not in the driver's.

The master and the worker are started with pyspark's own ``bin/spark-class`` on free loopback ports and stopped
at the end; the driver runs in a subprocess (``_cluster_driver.py``), as a job submitted to that master.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyspark
import pytest

from rxhubs.emulator import BackgroundEmulator

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
DRIVER = Path(__file__).with_name("_cluster_driver.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the {what} exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"the {what} did not listen on {port}")


def _without(env: Mapping[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    # a worker machine's environment: nothing the driver's local_session set in this process
    env = {**_without(os.environ, "RXHUBS_SPARK_PYTHON"), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_HOME": str(SPARK_CLASS.parent.parent), "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "PYSPARK_PYTHON": sys.executable}
    master_port, worker_port = free_port(), free_port()
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        return proc

    try:
        master = start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(master_port),
                       "--webui-port", str(free_port()))
        wait_for_port(master_port, master, "master")
        url = f"spark://127.0.0.1:{master_port}"
        worker = start("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port",
                       str(worker_port), "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g")
        wait_for_port(worker_port, worker, "worker")
        yield url
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)


@pytest.mark.timeout(600)
def test_executors_of_a_standalone_cluster_write_and_batch_read(
    cluster: str, emulator_factory: Any, tmp_path: Path
) -> None:
    emulator: BackgroundEmulator = emulator_factory(hubs={"c": 2})
    # a driver started afresh, as a user's would be: its local_session picks the Python its executors run
    env = {**_without(os.environ, "PYSPARK_PYTHON", "RXHUBS_SPARK_PYTHON"),
           "RXHUBS_TEST_CONNECTION_STRING": emulator.connection_string("c")}
    result = subprocess.run([sys.executable, str(DRIVER), cluster], env=env, capture_output=True, text=True,
                            timeout=560, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["master"] == cluster
    assert seen["executors"] >= 1  # an executor JVM of the worker (the driver is not one)
    assert seen["tasks"] == 4
    assert seen["read"] == sorted([f"cluster-{i}", f"key-{i % 3}"] for i in range(60))  # written, read back
