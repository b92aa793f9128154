"""Pytest plugin: Azurite (npm azurite@3.35.0) for the whole session, and a fresh container per test.

Register it in the root conftest (``pytest_plugins = ["tests.support.azurite"]``) or import the fixtures.
Azurite is never skipped: if ``node_modules`` is missing the fixture fails and says to run ``make test``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from rxhubs.testing._azurite import Azurite, AzuriteNotInstalledError


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """A running Azurite blob service on a free loopback port.

    ``.connection_string`` (the explicit devstoreaccount1 form, accepted by azure-storage-blob and by the
    official checkpoint store's vendored client), ``.port``, and ``stop()``/``start()`` to simulate an outage:
    a restart keeps the port and the data. Tests that stop it must start it again (``blob_container`` does
    it for the next test anyway).
    """
    try:
        server = Azurite(location=tmp_path_factory.mktemp("azurite"))
    except AzuriteNotInstalledError as exc:
        pytest.fail(f"{exc} (the store tests need Azurite; they are never skipped)", pytrace=False)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def blob_container(azurite: Azurite) -> str:
    """A container name no other test uses (not created: stores create it on the first write)."""
    azurite.start()  # a no-op unless an earlier test left it stopped
    return f"t-{uuid.uuid4().hex[:20]}"
