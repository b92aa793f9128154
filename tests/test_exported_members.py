"""The public surface: the names the brief promises stay importable."""

from __future__ import annotations

import importlib

import pytest

import rxhubs

PROMISED = {
    "Event", "EventBatch", "PartitionContext", "Position", "Checkpoint", "Ownership", "CloseReason",
    "EventHub", "partition_batches", "partitions", "consume", "run", "arun", "operators", "stores",
    "spark", "emulator", "testing", "errors", "run_workers",
}


def test_promised_names_are_exported_and_resolve() -> None:
    assert set(rxhubs.__all__) >= PROMISED
    for name in rxhubs.__all__:
        assert getattr(rxhubs, name) is not None, name


def test_all_is_sorted_and_dir_matches() -> None:
    assert rxhubs.__all__ == sorted(rxhubs.__all__, key=str)
    assert set(dir(rxhubs)) == set(rxhubs.__all__)


#: Every public package's __all__, exactly: adding or removing a public name is a decision, made here.
EXPORTS = {
    "rxhubs": {
        "Ack", "Backoff", "Checkpoint", "CloseReason", "ErrorContext", "Event", "EventBatch", "EventHub",
        "EventHubProperties", "EventProcessor", "Hub", "LastEnqueuedEventProperties", "Ownership",
        "PartitionContext", "PartitionProcessor", "PartitionProperties", "PartitionReceiver", "PartitionStream",
        "Position", "RxHubsError", "Shutdown", "WorkerContext", "WorkerReport", "WorkersSummary", "__version__",
        "arun", "consume", "emulator", "errors", "operators", "partition_batches", "partitions", "run",
        "run_workers", "spark", "stores", "tables", "testing", "windows",
    },
    "rxhubs.operators": {
        "CommitResult", "OutgoingEvent", "Publisher", "TransactionalSink", "checkpoint", "dead_letter",
        "exactly_once", "process", "publish", "read_position", "scan_state", "window",
    },
    "rxhubs.tables": {
        "COLUMNS", "DeltaSink", "InMemoryTable", "SqlSink", "SqliteSink", "postgresql", "read_delta", "sink_for",
        "sqlite",
    },
    "rxhubs.windows": {
        "CaughtUp", "EnqueuedTime", "EventTime", "ScanBatch", "WindowBatch", "WindowResult", "count", "fold",
        "hopping", "max", "min", "session", "sum", "tumbling",
    },
    "rxhubs.stores": {
        "BlobCheckpointStore", "CheckpointStore", "FencedCheckpointStore", "InMemoryCheckpointStore",
        "SdkCheckpointStore", "SdkStyleCheckpointStore", "SqliteCheckpointStore", "StatefulCheckpointStore",
        "StoreLike", "as_checkpoint_store", "from_url", "is_fenced", "is_stateful",
    },
    "rxhubs.spark": {
        "COLUMNS", "EventHubsDataSource", "LOCAL_CONF", "RxHubsDataSource", "SCHEMA", "arrow_schema",
        "get_or_create_session", "local_session", "property_to_str", "register_source", "to_arrow",
        "to_dataframe", "worker_python", "write",
    },
    "rxhubs.emulator": {
        "BackgroundEmulator", "Emulator", "EmulatorFaults", "IdentityEndpoint", "LinkRecord", "LocalIdentity",
        "LocalIdentityCredential",
        "credential_from_file",
    },
    "rxhubs.testing": {
        "FaultProxy", "InMemoryEventHub", "InMemoryReceiver", "MarbleSink", "MarbleTest", "Peer", "ProxyStats",
        "Signal", "marble_test", "never", "now", "sleep", "symbols", "to_symbols",
    },
    "rxhubs.errors": {
        "AuthenticationError", "CaptureGapError", "CheckpointOutOfRangeError", "ConfigurationError",
        "CorruptRecordError", "EmulatorError", "NotFoundError",
        "OwnershipConflictError", "OwnershipLostError", "QuotaExceededError", "ReceiverClosedError", "RxHubsError",
        "PublishError", "SinkError", "StateError", "StoreError", "TransportError",
    },
    "rxhubs.sources": {"BackfillHub", "Backoff", "Capture", "DEFAULTS", "ReadSettings", "partition_batches"},
    "rxhubs.schemas": {"AvroSchemas", "DecodedBatch", "JsonSchemas", "StaticTokenCredential", "UndecodableError",
                       "decode", "with_decoded"},
    "rxhubs.balancing": {
        "BalancingLoop", "BalancingSettings", "ConsumerOptions", "ConsumerSettings", "DEFAULT_EXPIRATION",
        "DEFAULT_INTERVAL", "LoopListener", "PRESENCE_SUFFIX", "PartitionSession", "PartitionStream", "Plan",
        "SessionState", "Strategy", "consume", "partitions", "plan", "presence_group",
    },
    "rxhubs.transport": {"DEFAULT_CONSUMER_GROUP", "EventHub", "Hub", "PartitionReceiver", "ReceiverBase"},
    "rxhubs.processor": {"EventProcessor", "PartitionProcessor"},
    "rxhubs.otel": {"instrument", "is_instrumented", "traced", "uninstrument"},
    "rxhubs.operate": {"LagServer", "PartitionLag", "ResetPlan", "ResetRow", "group_lag", "reset_positions"},
}


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_every_public_package_exports_exactly_its_pinned_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == EXPORTS[package]
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_the_brief_names_stay_where_they_are() -> None:
    """The names ../shared/BRIEF.md promises, at the paths it gives."""
    stores = importlib.import_module("rxhubs.stores")
    assert {"InMemoryCheckpointStore", "SqliteCheckpointStore", "BlobCheckpointStore"} <= set(stores.__all__)
    assert {"write", "to_dataframe"} <= set(importlib.import_module("rxhubs.spark").__all__)
    assert "Emulator" in importlib.import_module("rxhubs.emulator").__all__
    assert {"checkpoint", "process"} <= set(importlib.import_module("rxhubs.operators").__all__)
    assert "InMemoryEventHub" in importlib.import_module("rxhubs.testing").__all__
    assert callable(rxhubs.EventHub.from_connection_string)


def test_importing_rxhubs_does_not_import_spark() -> None:
    import subprocess
    import sys

    code = "import sys, rxhubs; print('pyspark' in sys.modules, 'rxhubs.emulator' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_importing_rxhubs_and_running_a_pipeline_does_not_import_opentelemetry() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rxhubs\n"
        "from rxhubs import operators as hops\n"
        "from reactivex.testing import TestScheduler\n"
        "hub, store = rxhubs.testing.InMemoryEventHub(partition_count=1), rxhubs.stores.InMemoryCheckpointStore()\n"
        "hub.send([b'a'], partition_id='0')\n"
        "scheduler, seen = TestScheduler(), []\n"
        "rxhubs.consume(hub, '$Default', store).pipe(hops.process(lambda b: None), hops.checkpoint(store))"
        ".subscribe(seen.append, scheduler=scheduler)\n"
        "scheduler.advance_to(1.0)\n"
        "print(len(seen), sorted(m for m in sys.modules if m.startswith('opentelemetry') or m == 'rxhubs.otel'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "[]"]
