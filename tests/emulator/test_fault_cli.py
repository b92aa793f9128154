"""``rxhubs emulator --control-port 0`` and ``rxhubs emulator fault ...`` against it, as subprocesses."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.exceptions import ConnectError

pytestmark = pytest.mark.timeout(90)

CLI = [sys.executable, "-m", "rxhubs.cli", "emulator"]


@pytest.fixture
def running() -> Iterator[tuple[str, str]]:
    """A ``rxhubs emulator`` process with fault control: (connection string, control address)."""
    proc = subprocess.Popen([*CLI, "--hub", "h:2", "--port", "0", "--control-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        conn = proc.stdout.readline().strip()
        lines: list[str] = []
        while not any("fault control on" in line for line in lines):
            lines.append(proc.stderr.readline())
            assert lines[-1], f"the emulator stopped: {''.join(lines)}"
        control = lines[-1].split("fault control on ")[1].split(":", 2)
        rest: list[str] = []
        drain = threading.Thread(target=lambda: rest.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        yield conn, f"{control[0]}:{control[1]}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        drain.join(10)
        assert proc.returncode == 0 and "Traceback" not in "".join(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fault(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "fault", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_faults_from_the_command_line(running: tuple[str, str]) -> None:
    conn, control = running
    assert control.startswith("127.0.0.1:")
    busy = fault("busy", "--seconds", "60", "--on", "attach,management", "--control", control)
    assert busy.returncode == 0, busy.stderr
    assert busy.stdout.startswith("server-busy on attach, management for every hub")
    with (EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer,
          pytest.raises(ConnectError, match=r"com\.microsoft:server-busy")):
        producer.get_partition_ids()
    status = fault("status", env={"RXHUBS_EMULATOR_CONTROL": control})
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].startswith("active faults: server-busy on attach, management")
    assert "consumer links: h=0" in status.stdout
    assert fault("clear", "--control", control).stdout.strip() == "no fault in force"
    grown = fault("partitions", "--hub", "h", "--count", "3", "--control", control)
    assert grown.returncode == 0 and grown.stdout.strip() == "event hub h has 3 partitions", grown.stderr
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        assert producer.get_partition_ids() == ["0", "1", "2"]
        producer.send_event(EventData("to the new partition"), partition_id="2")
    stolen = fault("steal", "--hub", "h", "--partition", "2", "--control", control)
    assert stolen.returncode == 0 and stolen.stdout.startswith("detached 0 receiver link(s)"), stolen.stderr
    closed = fault("close", "--control", control)
    assert closed.returncode == 0 and closed.stdout.startswith("closed "), closed.stderr
    assert fault("status", "--control", control).stdout.splitlines()[0] == "active faults: none"


@pytest.mark.parametrize("args, message", [
    (["partitions", "--hub", "h", "--count", "1"], "never removed"),
    (["busy", "--seconds", "5", "--on", "send"], "attach, flow, management"),
    (["busy", "--seconds", "-1"], "seconds must be"),
    (["steal", "--hub", "nohub", "--partition", "0"], "unknown event hub"),
    (["busy", "--seconds", "soon"], "invalid float value"),
    (["status", "--control", "nowhere"], "bad control address"),
    (["status", "--control", "127.0.0.1:1"], "no emulator fault control at 127.0.0.1:1"),
])
def test_bad_fault_input_exits_2_with_one_line(running: tuple[str, str], args: list[str], message: str) -> None:
    _, control = running
    if "--control" not in args:
        args = [*args, "--control", control]
    result = fault(*args)
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_control_api_answers_json_and_refuses_what_it_does_not_know(running: tuple[str, str]) -> None:
    _, control = running
    host, port = control.split(":")

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, object]]:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    status, answer = call("GET", "/status")
    assert status == 200 and answer["connections"] == 0 and answer["consumer_links"] == {"h": 0}
    assert call("GET", "/faults/busy")[0] == 405
    assert call("GET", "/nothing")[0] == 404
    status, answer = call("POST", "/faults/busy", b"[1, 2]")
    assert status == 400 and answer == {"error": "the body must be a JSON object"}
    status, answer = call("POST", "/faults/partitions", b'{"hub": "h", "count": "six"}')
    assert status == 400 and "whole number" in str(answer["error"])


def test_a_promotion_from_the_command_line(running: tuple[str, str]) -> None:
    conn, control = running
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.send_event(EventData("before"), partition_id="1")
        assert producer.get_partition_properties("1")["last_enqueued_offset"].isdigit()
    promoted = fault("promote", "--control", control)
    assert promoted.returncode == 0, promoted.stderr
    assert promoted.stdout.startswith("promoted: replication segment 1, closed ")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        assert producer.get_partition_properties("1")["last_enqueued_offset"].startswith("1:1:")
    status = fault("status", "--control", control)
    assert "replication segment: 1" in status.stdout, status.stdout
