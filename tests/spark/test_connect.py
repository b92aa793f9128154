"""Spark Connect: a local Connect server (Spark's own plugin) and a remote session reaching it over gRPC.

Python data sources run on the server (the client pickles the class, the server's Python workers run it), so
rxhubs is installed where the server runs, and the client only speaks the Connect protocol. The driver
script (``_connect_driver.py``) starts both in one subprocess, on a free loopback port, and through the remote
session writes a DataFrame to the emulator hub, reads it back with a batch read, and reads it with a
streaming query into Parquet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rxhubs.emulator import BackgroundEmulator

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("_connect_driver.py")


@pytest.mark.timeout(600)
def test_a_remote_session_reads_and_writes_through_a_local_connect_server(
    emulator_factory: Any, tmp_path: Path
) -> None:
    emulator: BackgroundEmulator = emulator_factory(hubs={"connect": 2})
    env = {**os.environ, "RXHUBS_TEST_CONNECTION_STRING": emulator.connection_string("connect")}
    result = subprocess.run([sys.executable, str(DRIVER), str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=560)
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["remote"] == "pyspark.sql.connect.session"  # a Connect client, not a classic session
    assert seen["read"] == sorted(f"connect-{i}" for i in range(40))  # written, then batch-read back
    assert seen["streamed"] == 40  # and read again by a streaming query
    # to_dataframe(local=False) on a Connect session: the keyword is ignored, the rows are there
    assert seen["converted"] == [["a", {"k": "1"}], ["b", {"k": "1"}], ["c", {"k": "1"}]]
