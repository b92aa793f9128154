"""``rxhubs emulator`` as a subprocess: connection strings, clean stop on SIGTERM/SIGINT, bad input."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.exceptions import AuthenticationError

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


def test_keys_websockets_and_any_case_consumer_groups() -> None:
    """``--keys`` requires SAS tokens (the connection strings carry the first key, the user's own, on stdout;
    never a key in the logs, even at -vv); ``--websocket-port`` adds AMQP over WebSockets; ``$default`` is
    accepted as the service accepts it."""
    proc = subprocess.Popen([sys.executable, "-m", "rxhubs.cli", "-vv", "emulator", "--port", "0",
                             "--websocket-port", "0", "--keys", "owner=0wner-K3y", "reader=r3ad-K3y",
                             "--consumer-group", "$default", "--consumer-group", "Analytics"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        conn = proc.stdout.readline().strip()
        assert "SharedAccessKeyName=owner;SharedAccessKey=0wner-K3y;" in conn
        banner: list[str] = []
        while not any("custom_endpoint_address=" in line for line in banner):  # -vv: log lines come between
            banner.append(proc.stderr.readline())
            assert banner[-1], "the emulator stopped before printing its WebSocket endpoint"
        assert any("SAS tokens required (keys: owner, reader)" in line for line in banner)
        endpoint = banner[-1].split("custom_endpoint_address=")[1].strip().strip("'")
        rest: list[str] = []  # keep draining stderr, or -vv logging could fill the pipe and stall the emulator
        drain = threading.Thread(target=lambda: rest.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        with EventHubProducerClient.from_connection_string(conn) as producer:
            producer.send_event(EventData("over amqp"))
        with EventHubProducerClient.from_connection_string(
                conn, transport_type=TransportType.AmqpOverWebsocket, custom_endpoint_address=endpoint) as producer:
            producer.send_event(EventData("over websockets"))
            assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] >= 0
        wrong = conn.replace("0wner-K3y", "guess")
        with (EventHubProducerClient.from_connection_string(wrong, retry_total=0) as producer,
              pytest.raises(AuthenticationError)):
            producer.send_event(EventData("refused"))
        with EventHubConsumerClient.from_connection_string(conn, consumer_group="ANALYTICS") as consumer:
            counts = [consumer.get_partition_properties(p)["last_enqueued_sequence_number"] + 1
                      for p in consumer.get_partition_ids()]
        assert sum(counts) == 2
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        drain.join(10)
        err = "".join(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "refused a token" in err  # -vv logs the refusal...
    assert "0wner-K3y" not in err + "".join(banner) and "r3ad-K3y" not in err and "sig=" not in err  # ...no secret


@pytest.mark.parametrize("args", [
    ["--keys", "owner"],
    ["--keys", "owner=s3cret", "owner=other"],
    ["--keys", "owner=has s3cret space"],
    ["--keys", "bad name=s3cret"],
    ["--websocket-port", "70000"],
])
def test_bad_keys_are_one_line_and_never_echo_the_key(args: list[str]) -> None:
    result = subprocess.run([*CMD, "--port", "0", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in result.stderr
    assert "s3cret" not in result.stderr and result.stdout == ""


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
