"""AMQP over TLS (``tls=True``): the unmodified azure-eventhub clients, sync and aio, trust the emulator's CA file."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.aio import EventHubProducerClient as AioProducer
from azure.eventhub.exceptions import EventHubError

import rxhubs
from rxhubs.emulator import BackgroundEmulator

from ._sdk import AioReceiver, SyncReceiver

pytestmark = pytest.mark.timeout(90)

HUB = "telemetry"


def test_the_official_clients_send_and_receive_over_tls_with_the_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    with BackgroundEmulator({HUB: 2}, tls=True, tls_ca_file=ca) as emulator:
        conn, options = emulator.tls_connection_string(HUB), emulator.tls_client_options()
        assert "UseDevelopmentEmulator" not in conn and conn.startswith("Endpoint=sb://127.0.0.1/;")
        assert options["connection_verify"] == str(ca) and ca.read_bytes().startswith(b"-----BEGIN CERTIFICATE")
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch(partition_id="0")
            for i in range(5):
                batch.add(EventData(f"tls-{i}"))
            producer.send_batch(batch)
        with SyncReceiver(conn, "0", starting_position="-1", client_options=options) as receiver:
            got = receiver.wait_events(5)
        assert [e.body_as_str() for e in got] == [f"tls-{i}" for i in range(5)]
        # the plain port still serves the development connection string
        with EventHubConsumerClient.from_connection_string(emulator.connection_string(HUB),
                                                           consumer_group="$Default") as plain:
            assert plain.get_partition_properties("0")["last_enqueued_sequence_number"] == 4
        # the certificate is the server's: a TLS handshake that trusts the CA and checks the name succeeds
        context = ssl.create_default_context(cafile=str(ca))
        port = emulator.emulator.tls_port  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port)) as raw,  \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


async def test_the_aio_clients_and_rxhubs_read_over_tls() -> None:
    with BackgroundEmulator({HUB: 1}, tls=True) as emulator:
        conn, options = emulator.tls_connection_string(HUB), emulator.tls_client_options()
        async with AioProducer.from_connection_string(conn, **options) as producer:
            batch = await producer.create_batch()
            batch.add(EventData("aio"))
            await producer.send_batch(batch)
        async with AioReceiver(conn, "0", starting_position="-1", client_options=options) as receiver:
            assert [e.body_as_str() for e in await receiver.wait_events(1)] == ["aio"]
        hub = rxhubs.EventHub.from_connection_string(conn, **options)
        try:
            async with hub.receiver("0", start=rxhubs.Position.earliest()) as reader:
                events = await reader.receive_batch(10, max_wait=10)
        finally:
            await hub.close()
        assert [e.body for e in events] == [b"aio"]


def test_a_client_that_does_not_trust_the_ca_is_refused() -> None:
    with BackgroundEmulator({HUB: 1}, tls=True) as emulator:
        conn = emulator.tls_connection_string(HUB)
        options = {k: v for k, v in emulator.tls_client_options().items() if k != "connection_verify"}
        with EventHubProducerClient.from_connection_string(conn, retry_total=0, **options) as producer, \
                pytest.raises(EventHubError, match=r"(?i)certificate"):
            producer.get_partition_ids()


def test_rxhubs_emulator_tls_from_the_command_line(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    proc = subprocess.Popen([sys.executable, "-m", "rxhubs.cli", "emulator", "--port", "0", "--hub", f"{HUB}:1",
                             "--tls", "--tls-port", "0", "--tls-ca-file", str(ca)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        line = next(line for line in iter(proc.stderr.readline, "") if "TLS" in line)
        endpoint = line.split("custom_endpoint_address=", 1)[1].split()[0].strip("',")
        conn = f"Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath={HUB}"
        with EventHubProducerClient.from_connection_string(conn, connection_verify=str(ca),
                                                           custom_endpoint_address=endpoint) as producer:
            assert producer.get_partition_ids() == ["0"]
    finally:
        proc.terminate()
        proc.wait(20)


def test_amqp_over_secure_websockets_from_the_command_line(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    proc = subprocess.Popen([sys.executable, "-m", "rxhubs.cli", "emulator", "--port", "0", "--hub", f"{HUB}:2",
                             "--tls", "--tls-port", "0", "--tls-ca-file", str(ca), "--tls-websocket-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        line = next(line for line in iter(proc.stderr.readline, "") if "secure WebSockets" in line)
        port = int(line.split("on port ", 1)[1].split(":")[0])
        conn = f"Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath={HUB}"
        wss = {"transport_type": TransportType.AmqpOverWebsocket, "custom_endpoint_address": f"sb://127.0.0.1:{port}"}
        with EventHubProducerClient.from_connection_string(conn, connection_verify=str(ca), **wss) as producer:
            assert producer.get_partition_ids() == ["0", "1"]
            batch = producer.create_batch(partition_id="1")
            batch.add(EventData("over wss"))
            producer.send_batch(batch)
        with SyncReceiver(conn, "1", starting_position="-1", client_options={"connection_verify": str(ca), **wss}) \
                as receiver:
            assert [e.body_as_str() for e in receiver.wait_events(1)] == ["over wss"]
        # TLS really is in the way: without the authority the handshake fails
        with EventHubProducerClient.from_connection_string(conn, retry_total=0, **wss) as untrusting, \
                pytest.raises(EventHubError, match=r"(?i)certificate"):
            untrusting.get_partition_ids()
    finally:
        proc.terminate()
        proc.wait(20)
