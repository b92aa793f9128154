"""pytest fixtures that run the Event Hubs emulator for a test suite.

Register with ``pytest_plugins = ["rxhubs.emulator.pytest_plugin"]`` in a top-level ``conftest.py``.
Importing this module has no side effects; the emulator starts only when a test asks for a fixture.

* ``eventhubs_emulator`` (session): one emulator on a free loopback port, hubs from the
  ``eventhubs_emulator_config`` fixture (override it to choose hubs, consumer groups or any other
  :class:`~rxhubs.emulator.Emulator` keyword, e.g. ``keys`` or ``websocket_port``).
* ``emulator_factory`` (function): ``emulator_factory(hubs={...}, data_dir=..., ...)`` starts a fresh emulator,
  stopped when the test ends; call ``.restart()`` on it to simulate a service restart.

Both hand out a :class:`~rxhubs.emulator.BackgroundEmulator`: it serves from its own thread, so sync tests and
any pytest-asyncio event loop can use it.

Example:
    >>> def test_send(eventhubs_emulator):  # doctest: +SKIP
    ...     conn_str = eventhubs_emulator.connection_string("telemetry")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from rxhubs.emulator._background import BackgroundEmulator

__all__ = ["emulator_factory", "eventhubs_emulator", "eventhubs_emulator_config"]

EmulatorFactory = Callable[..., BackgroundEmulator]


@pytest.fixture(scope="session")
def eventhubs_emulator_config() -> dict[str, Any]:
    """Keyword arguments for the session emulator: override this fixture to change hubs, groups, keys..."""
    return {"hubs": {"telemetry": 4}, "consumer_groups": ("rxhubs",)}


@pytest.fixture(scope="session")
def eventhubs_emulator(eventhubs_emulator_config: Mapping[str, Any]) -> Iterator[BackgroundEmulator]:
    """One emulator for the whole test session, on a free loopback port."""
    config = dict(eventhubs_emulator_config)
    hubs = config.pop("hubs", {"telemetry": 4})
    config.setdefault("host", "127.0.0.1")
    config.setdefault("port", 0)
    with BackgroundEmulator(hubs, **config) as emulator:
        yield emulator


@pytest.fixture
def emulator_factory() -> Iterator[EmulatorFactory]:
    """Start fresh emulators inside one test: ``emulator_factory(hubs={"h": 2}, data_dir=tmp_path)``."""
    started: list[BackgroundEmulator] = []

    def start(hubs: Mapping[str, int] | None = None, **options: Any) -> BackgroundEmulator:
        emulator = BackgroundEmulator(hubs or {"telemetry": 4}, **options).start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in reversed(started):
        emulator.stop()
