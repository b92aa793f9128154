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
    {"hubs": {"t": 1, "T": 2}},
    {"hubs": {"t": 1}, "websocket_port": 70000},
    {"hubs": {"t": 1}, "keys": {}},
    {"hubs": {"t": 1}, "keys": {"bad name": "s3cret"}},
    {"hubs": {"t": 1}, "keys": {"k": "s3cret;EntityPath=x"}},
    {"hubs": {"t": 1}, "keys": {"k": ""}},
])
def test_bad_configuration(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Emulator(**kwargs)  # type: ignore[arg-type]
    assert "s3cret" not in str(info.value)


def test_keys_choose_the_connection_string_and_never_show_in_reprs() -> None:
    emulator = Emulator(hubs={"t": 1}, keys={"owner": "0wner-K3y", "reader": "r3ad-K3y"})
    assert emulator.key_names == ("owner", "reader") and emulator.shared_access_key_name == "owner"
    assert "K3y" not in repr(emulator) and "K3y" not in repr(BackgroundEmulator({"t": 1}, keys={"o": "K3y"}))
    assert Emulator(hubs={"t": 1}).key_names == ()
    assert Emulator(hubs={"t": 1}, verify_tokens=True).key_names == ("RootManageSharedAccessKey",)


async def test_keyed_connection_strings_and_a_websocket_port_in_use() -> None:
    async with Emulator(hubs={"t": 1}, keys={"owner": "0wner-K3y", "reader": "r3ad-K3y"},
                        websocket_port=0) as emulator:
        assert "SharedAccessKeyName=reader;SharedAccessKey=r3ad-K3y;" in emulator.connection_string("t", "reader")
        with pytest.raises(ConfigurationError) as info:
            emulator.connection_string("t", "nobody")
        assert "K3y" not in str(info.value)
        taken = Emulator(hubs={"t": 1}, websocket_port=emulator.websocket_port)
        with pytest.raises(EmulatorError, match="cannot listen"):
            await taken.start()
        assert not taken.running
    with pytest.raises(EmulatorError):
        _ = emulator.websocket_port


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
    with BackgroundEmulator({"telemetry": 1}, data_dir=tmp_path, websocket_port=0) as emulator:
        port, websocket_port = emulator.port, emulator.websocket_port
        emulator.restart()
        assert emulator.port == port and emulator.websocket_port == websocket_port
    with pytest.raises(EmulatorError):
        emulator.connection_string("telemetry")
