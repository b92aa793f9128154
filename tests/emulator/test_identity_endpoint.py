"""azure-identity's DefaultAzureCredential, unmodified, authenticates against the emulator through IdentityEndpoint.

The real azure-identity (sync and aio) reads ``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER`` as on App Service, asks
the endpoint for an Event Hubs token, and the unmodified azure-eventhub client sends and reads over TLS with it;
the emulator requires authentication (``identities=[...]``, no SAS key), so nothing else could have let it in.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxhubs.emulator import BackgroundEmulator, IdentityEndpoint, LocalIdentity

HUB = "identity"


def _options(emulator: BackgroundEmulator) -> dict[str, Any]:
    """TLS options for a client built from a host name (with a custom endpoint the SDK defaults to WebSockets)."""
    from azure.eventhub import TransportType

    return {**emulator.tls_client_options(), "transport_type": TransportType.Amqp}


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[BackgroundEmulator, IdentityEndpoint]]:
    identity = LocalIdentity("app-service-identity")
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
                 "AZURE_USERNAME", "MSI_ENDPOINT", "IMDS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with BackgroundEmulator({HUB: 2}, identities=[identity], tls=True) as emulator, \
            IdentityEndpoint(identity) as endpoint:
        for name, value in endpoint.environment().items():
            monkeypatch.setenv(name, value)
        yield emulator, endpoint


def _read(emulator: BackgroundEmulator, token_credential: Any, count: int) -> list[str]:
    """Every partition's bodies from the start, read with ``token_credential`` over TLS (``count`` expected)."""
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient(fully_qualified_namespace="127.0.0.1", eventhub_name=HUB,
                                    consumer_group="$Default", credential=token_credential,
                                    **_options(emulator))
    got: list[str] = []
    enough = threading.Event()

    def on_batch(_context: Any, events: list[Any]) -> None:
        got.extend(e.body_as_str() for e in events)
        if len(got) >= count:
            enough.set()

    reader = threading.Thread(target=client.receive_batch, kwargs={"on_event_batch": on_batch,
                                                                   "starting_position": "-1", "max_wait_time": 1})
    reader.start()
    enough.wait(60)
    client.close()
    reader.join(30)
    return got


def test_default_azure_credential_sends_and_reads_with_the_endpoints_tokens(setup: Any) -> None:
    from azure.eventhub import EventData, EventHubProducerClient
    from azure.identity import DefaultAzureCredential

    emulator, endpoint = setup
    credential = DefaultAzureCredential()
    with EventHubProducerClient(fully_qualified_namespace="127.0.0.1", eventhub_name=HUB, credential=credential,
                                **_options(emulator)) as producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            batch.add(EventData(f"to {partition}"))
            producer.send_batch(batch)
    assert endpoint.issued >= 1  # the credential asked the endpoint (and caches what it got)
    assert sorted(_read(emulator, credential, 2)) == ["to 0", "to 1"]


def test_the_aio_credential_works_the_same(setup: Any) -> None:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient
    from azure.identity.aio import DefaultAzureCredential

    emulator, endpoint = setup

    async def send() -> None:
        async with DefaultAzureCredential() as credential, EventHubProducerClient(
                fully_qualified_namespace="127.0.0.1", eventhub_name=HUB, credential=credential,
                **_options(emulator)) as producer:
            await producer.send_batch([EventData("async")], partition_id="1")

    asyncio.run(send())
    assert endpoint.issued >= 1
    from azure.identity import DefaultAzureCredential as SyncDefault

    assert _read(emulator, SyncDefault(), 1) == ["async"]


def test_without_the_secret_header_no_token_and_the_hub_refuses(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.eventhub import EventHubProducerClient
    from azure.eventhub.exceptions import EventHubError
    from azure.identity import DefaultAzureCredential

    emulator, endpoint = setup
    url = endpoint.environment()["IDENTITY_ENDPOINT"] + "?api-version=2019-08-01&resource=https://eventhubs.azure.net"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, headers={"X-IDENTITY-HEADER": "guess"}))
    assert refused.value.code == 401 and "guess" not in json.dumps(json.load(refused.value))
    with pytest.raises(urllib.error.HTTPError) as other:  # a token for another resource: not this identity's
        urllib.request.urlopen(urllib.request.Request(url.replace("eventhubs.azure.net", "vault.azure.net"),
                                                      headers={"X-IDENTITY-HEADER": endpoint._secret}))
    assert other.value.code == 400
    monkeypatch.setenv("IDENTITY_HEADER", "not-the-secret")  # the fault: a credential that cannot get a token
    no_token = "DefaultAzureCredential failed to retrieve a token"
    with pytest.raises(EventHubError, match=no_token), EventHubProducerClient(
            fully_qualified_namespace="127.0.0.1", eventhub_name=HUB, credential=DefaultAzureCredential(),
            **_options(emulator)) as producer:
        producer.get_eventhub_properties()
    assert endpoint.issued == 0 and endpoint.refused >= 3
    assert endpoint._secret not in repr(endpoint)


def test_rxhubs_emulator_identity_endpoint_from_the_command_line(tmp_path: Path) -> None:
    """``rxhubs emulator --tls --identity-endpoint FILE``: a process with FILE's exports and DefaultAzureCredential
    gets in; the secret is only in FILE (mode 600), never on the command's output."""
    exports, ca = tmp_path / "identity.env", tmp_path / "ca.pem"
    proc = subprocess.Popen([sys.executable, "-m", "rxhubs.cli", "emulator", "--port", "0", "--hub", f"{HUB}:1",
                             "--tls", "--tls-port", "0", "--tls-ca-file", str(ca), "--identity-endpoint", str(exports)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        lines = []
        for line in iter(proc.stderr.readline, ""):
            lines.append(line)
            if "TLS" in line:
                break
        endpoint = lines[-1].split("custom_endpoint_address=", 1)[1].split()[0].strip("',")
        assert any("managed-identity endpoint" in line for line in lines), lines
        assert oct(exports.stat().st_mode & 0o777) == "0o600"
        script = (f"set -e; . {shlex.quote(str(exports))}; exec {shlex.quote(sys.executable)} -c "
                  + shlex.quote(_CHILD.format(hub=HUB, ca=str(ca), endpoint=endpoint)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.split() == ["['0']"], done.stderr[-3000:]
        secret = next(line for line in exports.read_text().splitlines() if "IDENTITY_HEADER" in line).split("=", 1)[1]
        assert secret.strip("'") not in "".join(lines)
    finally:
        proc.terminate()
        proc.wait(20)


_CHILD = """
from azure.eventhub import EventHubProducerClient, TransportType
from azure.identity import DefaultAzureCredential
with EventHubProducerClient(fully_qualified_namespace="127.0.0.1", eventhub_name="{hub}",
                            credential=DefaultAzureCredential(), connection_verify="{ca}",
                            custom_endpoint_address="{endpoint}", transport_type=TransportType.Amqp) as producer:
    print(producer.get_partition_ids())
"""
