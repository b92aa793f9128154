"""The public Emulator API: validation, properties, lifecycle."""

from __future__ import annotations

import pytest

from rxhubs.emulator import BackgroundEmulator, Emulator
from rxhubs.errors import ConfigurationError, EmulatorError


@pytest.mark.parametrize("kwargs", [
    {"hubs": {}},
    {"hubs": {"telemetry": 0}},
    {"hubs": {"telemetry": 2000}},
    {"hubs": {"telemetry": True}},
    {"hubs": {"bad name": 1}},
    {"hubs": {"t": 1}, "consumer_groups": ["no spaces"]},
    {"hubs": {"t": 1}, "port": 70000},
    {"hubs": {"t": 1}, "idle_timeout": 0},
])
def test_bad_configuration(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Emulator(**kwargs)  # type: ignore[arg-type]


async def test_lifecycle_and_connection_string() -> None:
    emulator = Emulator(hubs={"telemetry": 2}, consumer_groups=["analytics"])
    with pytest.raises(EmulatorError):
        _ = emulator.port
    assert emulator.consumer_groups == ("$Default", "analytics")
    async with emulator:
        assert emulator.running
        conn = emulator.connection_string("telemetry")
        assert conn == (f"Endpoint=sb://127.0.0.1:{emulator.port};SharedAccessKeyName=RootManageSharedAccessKey;"
                        "SharedAccessKey=SAS_KEY_VALUE;EntityPath=telemetry;UseDevelopmentEmulator=true")
        with pytest.raises(ConfigurationError):
            emulator.connection_string("unknown")
        with pytest.raises(EmulatorError):
            await emulator.start()
    assert not emulator.running


def test_background_emulator_restarts_on_the_same_port(tmp_path: object) -> None:
    with BackgroundEmulator({"telemetry": 1}, data_dir=tmp_path) as emulator:
        port = emulator.port
        emulator.restart()
        assert emulator.port == port
    with pytest.raises(EmulatorError):
        emulator.connection_string("telemetry")
