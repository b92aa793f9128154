"""The two hubs every transport-level contract runs over: the in-memory hub, and rxhubs.EventHub on the emulator.

Test modules import the fixture they need (``memory_env`` or ``azure_env``) and name it ``env``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest

from rxhubs.emulator.pytest_plugin import EmulatorFactory
from rxhubs.testing import InMemoryEventHub
from rxhubs.transport import EventHub
from rxhubs.transport._direct import DIRECT_VARIABLE
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, compiled_reader
from tests.transport.receiver_contract import HubEnv


@pytest.fixture
def quiet_sdk() -> Iterator[None]:
    """The SDK logs each refused attach and lost link at WARNING; the contracts cause them on purpose."""
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.fixture
def memory_env() -> HubEnv:
    hub = InMemoryEventHub(partition_count=2)

    async def send(bodies: Sequence[bytes], partition_id: str) -> None:
        hub.send(list(bodies), partition_id=partition_id)

    return HubEnv(hub, send)


@pytest.fixture
async def azure_env(emulator_factory: EmulatorFactory, quiet_sdk: None) -> AsyncIterator[HubEnv]:
    emulator = emulator_factory(hubs={"contract": 2})
    hub = EventHub.from_connection_string(emulator.connection_string("contract"))

    async def send(bodies: Sequence[bytes], partition_id: str) -> None:
        await hub.send(bodies, partition_id=partition_id)

    async with hub:
        yield HubEnv(hub, send)


@pytest.fixture(params=["native", "pure"])
def receive_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both direct receive paths: the compiled frame reader (the default), and ``RXHUBS_NO_EXTENSIONS=1``."""
    if request.param == "pure":
        monkeypatch.setenv(NO_EXTENSIONS_VARIABLE, "1")
    else:
        monkeypatch.delenv(NO_EXTENSIONS_VARIABLE, raising=False)
        assert compiled_reader() is not None, "make test builds the compiled frame reader; it is missing"
    return str(request.param)


@pytest.fixture
def public_receive_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Receivers use the SDK's public receive_batch loop instead of the direct path (rxhubs.transport._direct)."""
    monkeypatch.setenv(DIRECT_VARIABLE, "0")


@pytest.fixture
async def azure_public_env(public_receive_path: None, azure_env: HubEnv) -> HubEnv:
    return azure_env
