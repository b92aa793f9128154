"""Capture in the emulator: Avro files in the service's naming and schema, read here with fastavro itself."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import fastavro
import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.storage.blob import ContainerClient

from rxhubs.emulator import BackgroundEmulator
from rxhubs.testing._azurite import Azurite

pytestmark = pytest.mark.timeout(120)

HUB = "telemetry"
OFFICIAL_SCHEMA = {  # as the service writes it (docs and captured files)
    "type": "record", "name": "EventData", "namespace": "Microsoft.ServiceBus.Messaging",
    "fields": [
        {"name": "SequenceNumber", "type": "long"}, {"name": "Offset", "type": "string"},
        {"name": "EnqueuedTimeUtc", "type": "string"},
        {"name": "SystemProperties", "type": {"type": "map", "values": ["long", "double", "string", "bytes"]}},
        {"name": "Properties", "type": {"type": "map", "values": ["long", "double", "string", "bytes", "null"]}},
        {"name": "Body", "type": ["null", "bytes"]},
    ],
}
NAME = re.compile(r"^emulator/telemetry/(\d+)/\d{4}/\d{2}/\d{2}/\d{2}/\d{2}/\d{2}\.avro$")
TIME = re.compile(r"^\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2} [AP]M$")


def _send(conn: str, count: int, partition_id: str = "0", chunk: int = 250, **extra: object) -> None:
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for lo in range(0, count, chunk):
            batch = producer.create_batch(partition_id=partition_id)
            for i in range(lo, min(count, lo + chunk)):
                event = EventData(f"e{i}")
                event.properties = {"i": i, "kind": "reading", "ok": True}
                event.content_type = "application/json"
                batch.add(event)
            producer.send_batch(batch)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.avro"))}


def _records(files: dict[str, bytes], partition_id: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for name in sorted(files):
        m = NAME.match(name)
        assert m, name
        if m.group(1) == partition_id:
            out.extend(fastavro.reader(io.BytesIO(files[name])))  # type: ignore[arg-type]
    return out


def _wait_for(predicate: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_capture_writes_every_event_in_the_official_naming_and_schema(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    with BackgroundEmulator({HUB: 2}, capture=root, capture_window=1.0, retain_events=500) as emulator:
        _send(emulator.connection_string(HUB), 2000)
        _wait_for(lambda: len(_records(_files(root), "0")) == 2000, "Capture never held the 2,000 events")
        _wait_for(lambda: any(NAME.match(n) and NAME.match(n).group(1) == "1" for n in _files(root)),  # type: ignore[union-attr]
                  "no empty file for the idle partition")
    files = _files(root)
    records = _records(files, "0")
    assert [r["SequenceNumber"] for r in records] == list(range(2000))  # all of it, though the hub kept 500
    first = records[0]
    assert first["Body"] == b"e0"
    assert first["Properties"] == {"i": 0, "kind": "reading", "ok": "true"}
    assert first["SystemProperties"]["content-type"] == "application/json"  # type: ignore[index]
    assert TIME.match(str(first["EnqueuedTimeUtc"])), first["EnqueuedTimeUtc"]
    offsets = [int(str(r["Offset"])) for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == 2000
    for name, data in files.items():
        reader = fastavro.reader(io.BytesIO(data))
        assert reader.metadata["avro.codec"] == "null"
        assert json.loads(reader.metadata["avro.schema"]) == OFFICIAL_SCHEMA, name
    empty = [n for n in files if NAME.match(n).group(1) == "1"]  # type: ignore[union-attr]
    assert empty and all(not list(fastavro.reader(io.BytesIO(files[n]))) for n in empty)  # empty files
    names = sorted(n for n in files if NAME.match(n).group(1) == "0")  # type: ignore[union-attr]
    assert len(names) == len(set(names)) >= 1


def test_the_size_window_closes_a_file_early_and_a_stop_writes_the_open_window(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    with BackgroundEmulator({HUB: 1}, capture=root, capture_window=3600.0, capture_size=20_000) as emulator:
        _send(emulator.connection_string(HUB), 1000, chunk=100)
        _wait_for(lambda: len(_files(root)) >= 2, "a full size window was not written")
    records = _records(_files(root), "0")
    assert [r["SequenceNumber"] for r in records] == list(range(1000))  # the stop wrote the rest


def test_capture_to_a_blob_container_on_azurite(azurite: Azurite, blob_container: str) -> None:
    with BackgroundEmulator({HUB: 1}, capture=f"blob://{blob_container}/raw", capture_window=1.0,
                            capture_connection_string=azurite.connection_string) as emulator:
        assert azurite.connection_string not in repr(emulator.emulator.history.target)  # type: ignore[union-attr]
        _send(emulator.connection_string(HUB), 300)
    container = ContainerClient.from_connection_string(azurite.connection_string, blob_container)
    files = {b.name.removeprefix("raw/"): container.download_blob(b.name).readall()
             for b in container.list_blobs(name_starts_with="raw/")}
    assert [r["SequenceNumber"] for r in _records(files, "0")] == list(range(300))
