"""One local SparkSession for the whole Spark test package (start-up takes about 5 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rxhubs.spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
