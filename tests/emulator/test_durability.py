"""Durable partition logs: restart keeps every event, a torn last record is dropped, kill -9 loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator._hubs import MAGIC, Partition

from ._sdk import SyncReceiver

pytestmark = pytest.mark.timeout(60)

HUB = "telemetry"


def _send(conn: str, bodies: list[str], partition_id: str = "0") -> None:
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = producer.create_batch(partition_id=partition_id)
        for body in bodies:
            batch.add(EventData(body))
        producer.send_batch(batch)


def test_torn_tail_record_is_ignored_on_recovery(tmp_path: Path) -> None:
    log = tmp_path / HUB / "0.log"
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path) as emulator:
        _send(emulator.connection_string(HUB), [f"e{i}" for i in range(5)])
    size = log.stat().st_size
    whole = log.read_bytes()
    with log.open("ab") as f:  # a record cut short by a kill mid-write: header and half the body
        f.write(whole[len(MAGIC) : len(MAGIC) + 40])
    assert log.stat().st_size == size + 40
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path) as emulator:
        conn = emulator.connection_string(HUB)
        assert log.stat().st_size == size  # the torn record was cut away
        _send(conn, ["after"])
        with SyncReceiver(conn, "0", starting_position="-1") as receiver:
            got = receiver.wait_events(6)
    assert [e.body_as_str() for e in got] == ["e0", "e1", "e2", "e3", "e4", "after"]
    assert [e.sequence_number for e in got] == list(range(6))
    assert int(got[-1].offset) == size


def test_corrupt_record_stops_recovery_there(tmp_path: Path) -> None:
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path) as emulator:
        _send(emulator.connection_string(HUB), ["a", "b", "c"])
    log = tmp_path / HUB / "0.log"
    blob = bytearray(log.read_bytes())
    blob[-3] ^= 0xFF  # flip a byte in the last record's body: its checksum no longer matches
    log.write_bytes(bytes(blob))
    partition = Partition(HUB, "0", log)
    try:
        assert partition.last_sequence_number == 1
    finally:
        partition.close()


def test_kill_9_loses_no_acknowledged_event(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "rxhubs.cli", "emulator", "--hub", f"{HUB}:1", "--port", "0",
           "--data-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        conn = proc.stdout.readline().strip()
        acknowledged = 0
        enough = threading.Event()

        def produce() -> None:
            nonlocal acknowledged
            try:
                with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
                    while True:
                        batch = producer.create_batch(partition_id="0")
                        for i in range(50):
                            batch.add(EventData(f"{acknowledged + i}"))
                        producer.send_batch(batch)
                        acknowledged += 50
                        if acknowledged >= 500:
                            enough.set()
            except Exception:
                enough.set()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        assert enough.wait(30)
        os.kill(proc.pid, signal.SIGKILL)  # while the producer is still sending
        proc.wait(10)
        thread.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    with BackgroundEmulator({HUB: 1}, data_dir=tmp_path) as emulator:
        conn = emulator.connection_string(HUB)
        with EventHubProducerClient.from_connection_string(conn) as producer:
            stored = producer.get_partition_properties("0")["last_enqueued_sequence_number"] + 1
        assert stored >= acknowledged >= 500
        with SyncReceiver(conn, "0", starting_position="-1", max_batch_size=1000, prefetch=1000) as receiver:
            got = receiver.wait_events(stored)
        assert [int(e.body_as_str()) for e in got[:stored]] == list(range(stored))
