"""``rxhubs emulator --retention/--retain-events/--capture`` as a subprocess, with the official client."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import fastavro
import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

pytestmark = pytest.mark.timeout(60)

CMD = [sys.executable, "-m", "rxhubs.cli", "emulator", "--port", "0"]


def test_retention_and_capture_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    proc = subprocess.Popen([*CMD, "--hub", "telemetry:2", "--retain-events", "5", "--retention", "3600",
                             "--capture", str(root), "--capture-window", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        conn = proc.stdout.readline().strip()
        with EventHubProducerClient.from_connection_string(conn) as producer:
            batch = producer.create_batch(partition_id="0")
            for i in range(20):
                batch.add(EventData(f"e{i}"))
            producer.send_batch(batch)
        with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as client:
            props = client.get_partition_properties("0")
        assert (props["beginning_sequence_number"], props["last_enqueued_sequence_number"]) == (15, 19)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Capture to FolderTarget" in err
    files = sorted((root / "emulator" / "telemetry" / "0").rglob("*.avro"))
    seqs = [r["SequenceNumber"] for f in files for r in fastavro.reader(io.BytesIO(f.read_bytes()))]  # type: ignore[index]
    assert seqs == list(range(20))


@pytest.mark.parametrize(("args", "message"), [
    (["--retention", "soon"], "bad --retention 'soon'"),
    (["--retain-events", "0"], "retain_events must be a whole number >= 1"),
    (["--retain-events", "5", "--retain-events", "telemetry=3"], "not both"),
    (["--capture", "blob://c"], "needs a storage connection string"),
])
def test_bad_history_options_exit_2_with_one_line(args: list[str], message: str) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    done = subprocess.run([*CMD, "--hub", "telemetry:1", *args], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
