"""``spark.readStream.format("eventhubs")`` works in a fresh session with no registration call.

The wheel that ``python -m build`` makes is installed into a folder put on ``PYTHONPATH``, the way
site-packages holds it after ``pip install rxhubs[spark]``; a new driver process (and its Python workers)
then reads the emulator by format name alone. Spark's own lookup (``pyspark/sql/worker/lookup_data_sources.py``)
imports the wheel's ``pyspark_rxhubs`` and ``pyspark_rxhubs_eventhubs`` modules and registers their sources.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from tests.support.package import build_distributions, install_wheel_to

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = Path(__file__).with_name("_discovery_driver.py")


def send(conn_str: str) -> None:
    async def go() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for p in ("0", "1"):
                await hub.send([f"{p}-{i}" for i in range(20)], partition_id=p)

    asyncio.run(go())


@pytest.mark.timeout(600)
def test_a_fresh_session_reads_by_format_name_from_the_installed_wheel(
    emulator_factory: Any, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    site = install_wheel_to(build_distributions(tmp_path_factory).wheel, tmp_path / "site")
    emulator = emulator_factory(hubs={"hub": 2})
    conn = emulator.connection_string("hub")
    send(conn)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), RXHUBS_TEST_CONNECTION_STRING=conn)
    result = subprocess.run(
        [sys.executable, str(DRIVER), str(tmp_path / "out")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert all(path.startswith(str(site)) for path in report["modules"]), report["modules"]  # the wheel's
    assert report["counts"]["eventhubs"] == {"rows": 40, "distinct": 40, "batches": 1}
    assert report["counts"]["rxhubs"] == {"rows": 40, "distinct": 40, "batches": 3}  # maxEventsPerTrigger 15
    assert report["counts"]["batch"] == {"rows": 50, "written": 10, "tasks": 4}  # df.write, then spark.read
    # register_source, kept for older setups, stays harmless next to the discovered names
    assert report["columns_after_register"][:3] == ["body", "partition", "offset"]
    assert conn not in result.stdout + result.stderr
