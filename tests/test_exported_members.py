"""The public surface: the names the brief promises stay importable."""

from __future__ import annotations

import importlib

import rxhubs

PROMISED = {
    "Event", "EventBatch", "PartitionContext", "Position", "Checkpoint", "Ownership", "CloseReason",
    "EventHub", "partition_batches", "partitions", "consume", "run", "arun", "operators", "stores",
    "spark", "emulator", "testing", "errors",
}


def test_promised_names_are_exported_and_resolve() -> None:
    assert set(rxhubs.__all__) >= PROMISED
    for name in rxhubs.__all__:
        assert getattr(rxhubs, name) is not None, name


def test_all_is_sorted_and_dir_matches() -> None:
    assert rxhubs.__all__ == sorted(rxhubs.__all__, key=str)
    assert set(dir(rxhubs)) == set(rxhubs.__all__)


def test_submodule_facades() -> None:
    testing = importlib.import_module("rxhubs.testing")
    assert {"InMemoryEventHub", "marble_test", "symbols"} <= set(testing.__all__)
    stores = importlib.import_module("rxhubs.stores")
    assert {"InMemoryCheckpointStore", "SqliteCheckpointStore", "BlobCheckpointStore"} <= set(stores.__all__)
    operators = importlib.import_module("rxhubs.operators")
    assert "checkpoint" in operators.__all__
    spark = importlib.import_module("rxhubs.spark")
    assert {"write", "to_dataframe"} <= set(spark.__all__)
    emulator = importlib.import_module("rxhubs.emulator")
    assert "Emulator" in emulator.__all__


def test_importing_rxhubs_does_not_import_spark() -> None:
    import subprocess
    import sys

    code = "import sys, rxhubs; print('pyspark' in sys.modules, 'rxhubs.emulator' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
