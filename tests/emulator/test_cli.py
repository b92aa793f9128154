"""``rxhubs emulator`` as a subprocess: connection strings, clean stop on SIGTERM/SIGINT, bad input."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from azure.eventhub import EventHubProducerClient

pytestmark = pytest.mark.timeout(60)

CMD = [sys.executable, "-m", "rxhubs.cli", "emulator"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serves_until_signalled(sig: signal.Signals) -> None:
    proc = subprocess.Popen([*CMD, "--hub", "telemetry:3", "--hub", "orders:1", "--port", "0",
                             "--consumer-group", "analytics"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines[0].startswith("Endpoint=sb://127.0.0.1:") and lines[0].endswith(
            "EntityPath=telemetry;UseDevelopmentEmulator=true")
        assert "EntityPath=orders;" in lines[1]
        with EventHubProducerClient.from_connection_string(lines[0]) as producer:
            assert producer.get_partition_ids() == ["0", "1", "2"]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "Traceback" not in err and "stopped" in err


@pytest.mark.parametrize("args", [
    ["--hub", "telemetry:x"],
    ["--hub", "telemetry:0"],
    ["--hub", "bad name:2"],
    ["--hub", "a:1", "--hub", "a:2"],
    ["--consumer-group", "no spaces please"],
    ["--port", "70000"],
])
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    result = subprocess.run([*CMD, "--port", "0", *args] if "--port" not in args else [*CMD, *args],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_port_in_use_is_one_line_and_exit_2() -> None:
    first = subprocess.Popen([*CMD, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        port = first.stdout.readline().split(":")[2].split(";")[0]
        result = subprocess.run([*CMD, "--port", port], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1 and "cannot listen" in result.stderr
    finally:
        first.terminate()
        first.communicate(timeout=20)
