"""The rxhubs.spark facade: its names, and that importing it loads neither pyspark nor pyarrow."""

from __future__ import annotations

import subprocess
import sys

import rxhubs.spark


def test_the_public_names_are_pinned() -> None:
    assert rxhubs.spark.__all__ == [
        "COLUMNS",
        "EventHubsDataSource",
        "LOCAL_CONF",
        "RxHubsDataSource",
        "SCHEMA",
        "arrow_schema",
        "get_or_create_session",
        "local_session",
        "property_to_str",
        "register_source",
        "to_arrow",
        "to_dataframe",
        "worker_python",
        "write",
    ]
    for name in rxhubs.spark.__all__:
        assert getattr(rxhubs.spark, name) is not None


def test_importing_rxhubs_spark_and_building_a_sink_loads_neither_pyspark_nor_pyarrow() -> None:
    code = (
        "import sys, rxhubs, rxhubs.spark; rxhubs.spark.write(print); "
        "print('pyspark' in sys.modules, 'pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_local_settings_bind_loopback_and_enable_arrow() -> None:
    conf = rxhubs.spark.LOCAL_CONF
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.ui.enabled"] == conf["spark.ui.showConsoleProgress"] == "false"
