"""The fixtures azure-eventhub's own live tests ask for, served by a local emulator over TLS (a pytest plugin).

azure-eventhub's ``tests/livetest`` run against a real namespace: their ``conftest.py`` creates a hub per test
through Azure Resource Manager and hands the tests its host name, SAS key and an Azure AD credential. This
plugin replaces that conftest (the tests themselves run unmodified, from the sdist of the installed version):
one ``rxhubs emulator`` in this process serves AMQP over TLS on port 5671 (the service's) and AMQP over secure
WebSockets on port 443, with SAS keys checked and a :class:`~rxhubs.emulator.LocalIdentity` standing in for
Azure AD; each test gets a hub no other test used, as the service's conftest gives it a new one.

The clients reach ``127.0.0.1`` exactly as they reach ``*.servicebus.windows.net``: TLS, the service's ports,
and the certificate checked against certifi's bundle (``certifi.where()``, which the SDK uses when no
``connection_verify`` is given). The run trusts the emulator's authority without touching the SDK or the
installed certifi: ``RXHUBS_CERTIFI_BUNDLE`` names the ``cacert.pem`` of a per-run copy of the certifi package
that is first on ``PYTHONPATH``; this plugin writes the real bundle plus the emulator's authority there once
the emulator made it. Ports 5671 and 443 are the service's, so the caller runs this in a private network
namespace (``unshare --net``) when it can: ``RXHUBS_BRING_LO_UP=1`` brings that namespace's loopback up.
tests/emulator/test_official_live_tests.py is the caller.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import struct
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rxhubs.emulator import BackgroundEmulator, LocalIdentity

HOST = "127.0.0.1"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "official-live-tests-key"
PARTITION_COUNT = 2  # the official conftest's
HUBS = 400  # one fresh hub per test
_next_hub = itertools.count()


def bring_loopback_up() -> None:
    """``ip link set lo up`` without the ip tool: a new network namespace starts with its loopback down."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH22x", b"lo", flags | 0x1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        sock.close()


class SyncIdentityCredential:
    """A sync token credential issuing a :class:`LocalIdentity`'s tokens (the role of azure-identity's)."""

    def __init__(self, identity: LocalIdentity) -> None:
        self._identity = identity

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self._identity.token(), int(time.time() + self._identity.lifetime))

    def close(self) -> None:
        return None

    def __enter__(self) -> SyncIdentityCredential:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


IDENTITY = LocalIdentity("official-live-tests")


def identity_credential(is_async: bool = False) -> Any:
    """The ``get_credential`` the tests call: a token credential the emulator accepts (no Azure AD reached)."""
    return IDENTITY.credential() if is_async else SyncIdentityCredential(IDENTITY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sleep", action="store", default="True", help="sleep on reconnect test: True or False")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "liveTest: mark test to be a live test only")
    config.addinivalue_line("markers", "no_amqpproxy: mark test to opt out of amqp proxy recording")


@pytest.fixture(scope="session")
def _emulator() -> Iterator[BackgroundEmulator]:
    if os.environ.get("RXHUBS_BRING_LO_UP") == "1":
        bring_loopback_up()
    bundle = Path(os.environ["RXHUBS_CERTIFI_BUNDLE"])
    original = Path(os.environ["RXHUBS_CERTIFI_ORIGINAL"]).read_bytes()
    hubs = {f"eh{i}": PARTITION_COUNT for i in range(HUBS)}
    tls_port = int(os.environ.get("RXHUBS_TLS_PORT", "5671"))
    wss_port = int(os.environ.get("RXHUBS_WSS_PORT", "443"))
    with BackgroundEmulator(hubs, keys={KEY_NAME: KEY}, identities=[IDENTITY], tls=True, tls_port=tls_port,
                            tls_websocket_port=wss_port) as emulator:
        ca_file = Path(emulator.tls_client_options()["connection_verify"])
        trusted = os.environ.get("RXHUBS_TRUST_EMULATOR", "1") == "1"  # "0": the check that trust is needed
        bundle.write_bytes(original + (b"\n" + ca_file.read_bytes() if trusted else b""))
        yield emulator


@pytest.fixture(scope="session")
def sleep(request: pytest.FixtureRequest) -> bool:
    return str(request.config.getoption("--sleep")).lower() in ("true", "yes", "1", "y")


@pytest.fixture(scope="session", params=[False], ids=["pyamqp"])
def uamqp_transport(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture(scope="session", params=["Amqp", "AmqpOverWebsocket"], ids=["amqp", "ws"])
def socket_transport(request: pytest.FixtureRequest) -> Any:
    from azure.eventhub import TransportType

    return getattr(TransportType, request.param)


@pytest.fixture(scope="session")
def timeout_factor(uamqp_transport: bool) -> int:
    return 1


@pytest.fixture(scope="session")
def fake_span() -> Any:
    from tracing_common import FakeSpan  # the sdist's tests/tracing_common.py

    return FakeSpan


@pytest.fixture()
def enable_tracing(fake_span: Any) -> Iterator[Any]:
    from azure.core.settings import settings

    settings.tracing_implementation.set_value(fake_span)
    yield fake_span
    settings.tracing_implementation.set_value(None)


@pytest.fixture(scope="session")
def storage_url() -> str:
    pytest.skip("AZURE_STORAGE_ACCOUNT undefined: the blob checkpoint store needs Azure Storage and Azure AD")


@pytest.fixture()
def checkpoint_store(storage_url: str) -> Any:
    raise AssertionError("unreachable: storage_url skips")  # pragma: no cover


@pytest.fixture()
def checkpoint_store_aio(storage_url: str) -> Any:
    raise AssertionError("unreachable: storage_url skips")  # pragma: no cover


@pytest.fixture()
def faultinjector() -> Any:
    pytest.skip("Fault injector not enabled: it is Microsoft's AMQP fault-injecting proxy (USE_FAULTINJECTOR)")


@pytest.fixture(scope="session")
def get_credential() -> Any:
    return identity_credential


@pytest.fixture(scope="session")
def get_credential_async() -> Any:
    return partial(identity_credential, is_async=True)


@pytest.fixture()
def client_args() -> dict[str, Any]:
    return {}  # what the official conftest gives when not recording through its AMQP proxy


@pytest.fixture()
def live_eventhub(_emulator: BackgroundEmulator) -> dict[str, str]:
    hub = f"eh{next(_next_hub)}"
    return {"resource_group": "local", "hostname": HOST, "key_name": KEY_NAME, "access_key": KEY,
            "namespace": "emulator", "event_hub": hub, "consumer_group": "$Default", "partition": "0",
            "connection_str": f"Endpoint=sb://{HOST}/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                              f"EntityPath={hub}"}


def _connection_string(host: str, key_name: str, key: str, hub: str) -> str:
    return f"Endpoint=sb://{host}/;SharedAccessKeyName={key_name};SharedAccessKey={key};EntityPath={hub}"


@pytest.fixture()
def connection_str(live_eventhub: dict[str, str]) -> str:
    return _connection_string(HOST, KEY_NAME, KEY, live_eventhub["event_hub"])


@pytest.fixture()
def invalid_hostname(live_eventhub: dict[str, str]) -> str:
    # A name that does not resolve, as in the official conftest (a namespace nobody owns).
    return _connection_string("invalid123.servicebus.windows.net", KEY_NAME, KEY, live_eventhub["event_hub"])


@pytest.fixture()
def invalid_key(live_eventhub: dict[str, str]) -> str:
    return _connection_string(HOST, KEY_NAME, "invalid", live_eventhub["event_hub"])


@pytest.fixture()
def invalid_policy(live_eventhub: dict[str, str]) -> str:
    return _connection_string(HOST, "invalid", KEY, live_eventhub["event_hub"])


def _receivers(live_eventhub: dict[str, str], timeout: float) -> list[Any]:
    """One raw pyamqp receiver per partition, opened with a SAS token, as the official fixtures make them."""
    from azure.eventhub._pyamqp import ReceiveClient
    from azure.eventhub._pyamqp.authentication import SASTokenAuth

    uri = f"sb://{HOST}/{live_eventhub['event_hub']}"
    out = []
    for partition in range(PARTITION_COUNT):
        source = (f"amqps://{HOST}/{live_eventhub['event_hub']}/ConsumerGroups/{live_eventhub['consumer_group']}"
                  f"/Partitions/{partition}")
        receiver = ReceiveClient(HOST, source, auth=SASTokenAuth(uri, uri, KEY_NAME, KEY), network_trace=False,
                                 timeout=timeout, link_credit=500)
        receiver.open()
        out.append(receiver)
    return out


@pytest.fixture()
def connstr_receivers(live_eventhub: dict[str, str]) -> Iterator[tuple[str, list[Any]]]:
    receivers = _receivers(live_eventhub, 0)
    yield live_eventhub["connection_str"], receivers
    for receiver in receivers:
        receiver.close()


@pytest.fixture()
def auth_credentials(live_eventhub: dict[str, str]) -> tuple[str, str, Any]:
    return HOST, live_eventhub["event_hub"], identity_credential


@pytest.fixture()
def auth_credentials_async(live_eventhub: dict[str, str]) -> tuple[str, str, Any]:
    return HOST, live_eventhub["event_hub"], partial(identity_credential, is_async=True)


@pytest.fixture()
def auth_credential_receivers(live_eventhub: dict[str, str]) -> Iterator[tuple[str, str, Any, list[Any]]]:
    receivers = _receivers(live_eventhub, 30)
    yield HOST, live_eventhub["event_hub"], identity_credential, receivers
    for receiver in receivers:
        receiver.close()


@pytest.fixture()
def auth_credential_receivers_async(live_eventhub: dict[str, str]) -> Iterator[tuple[str, str, Any, list[Any]]]:
    receivers = _receivers(live_eventhub, 30)
    yield HOST, live_eventhub["event_hub"], partial(identity_credential, is_async=True), receivers
    for receiver in receivers:
        receiver.close()


def _senders(live_eventhub: dict[str, str]) -> tuple[Any, list[Any]]:
    from azure.eventhub import EventHubProducerClient

    client = EventHubProducerClient(fully_qualified_namespace=HOST, eventhub_name=live_eventhub["event_hub"],
                                    credential=identity_credential())
    return client, [client._create_producer(partition_id=p) for p in client.get_partition_ids()]


@pytest.fixture()
def auth_credential_senders(live_eventhub: dict[str, str]) -> Iterator[tuple[str, str, Any, list[Any]]]:
    client, senders = _senders(live_eventhub)
    yield HOST, live_eventhub["event_hub"], identity_credential, senders
    for sender in senders:
        sender.close()
    client.close()


@pytest.fixture()
def auth_credential_senders_async(live_eventhub: dict[str, str]) -> Iterator[tuple[str, str, Any, list[Any]]]:
    client, senders = _senders(live_eventhub)
    yield HOST, live_eventhub["event_hub"], partial(identity_credential, is_async=True), senders
    for sender in senders:
        sender.close()
    client.close()
