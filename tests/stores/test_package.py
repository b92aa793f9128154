"""rxhubs.stores' surface: exported names, from_url, and a light import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import rxhubs.stores
from rxhubs.errors import ConfigurationError
from rxhubs.stores import (
    BlobCheckpointStore,
    InMemoryCheckpointStore,
    SqliteCheckpointStore,
    from_url,
)

ROOT = Path(__file__).resolve().parents[2]


def test_exported_names_are_pinned() -> None:
    assert sorted(rxhubs.stores.__all__) == [
        "BlobCheckpointStore",
        "CheckpointStore",
        "FencedCheckpointStore",
        "InMemoryCheckpointStore",
        "SdkCheckpointStore",
        "SdkStyleCheckpointStore",
        "SqliteCheckpointStore",
        "StatefulCheckpointStore",
        "StoreLike",
        "as_checkpoint_store",
        "from_url",
        "is_fenced",
        "is_stateful",
    ]
    for name in rxhubs.stores.__all__:
        value = getattr(rxhubs.stores, name)
        if name == "StoreLike":  # a type alias: what public signatures accept as a store
            assert set(value.__args__) == {rxhubs.stores.CheckpointStore, rxhubs.stores.SdkStyleCheckpointStore}
        else:
            assert value.__name__ == name


def test_importing_the_stores_does_not_import_the_storage_sdk() -> None:
    code = "import sys, rxhubs.stores; print(any(m.startswith('azure.storage') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_memory_url() -> None:
    assert isinstance(from_url("memory:"), InMemoryCheckpointStore)
    assert isinstance(from_url("memory://"), InMemoryCheckpointStore)


async def test_sqlite_urls_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = from_url("sqlite:///state/checkpoints.sqlite")
    absolute = from_url(f"sqlite:///{tmp_path}/abs%20dir/c.sqlite")
    try:
        assert isinstance(relative, SqliteCheckpointStore) and isinstance(absolute, SqliteCheckpointStore)
        assert relative.path == "state/checkpoints.sqlite"
        assert absolute.path == f"{tmp_path}/abs dir/c.sqlite"
        assert (tmp_path / "state").is_dir() and (tmp_path / "abs dir").is_dir()
    finally:
        await relative.close()
        await absolute.close()


async def test_blob_url_takes_the_connection_string_from_a_keyword_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    given = from_url("blob://checkpoints", connection_string="UseDevelopmentStorage=true")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    from_env = from_url("blob://other-container/", create_container=False)
    assert isinstance(given, BlobCheckpointStore) and isinstance(from_env, BlobCheckpointStore)
    assert (given.container_name, from_env.container_name) == ("checkpoints", "other-container")
    await given.close()
    await from_env.close()


def test_blob_url_without_a_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(ConfigurationError, match="AZURE_STORAGE_CONNECTION_STRING"):
        from_url("blob://checkpoints")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "checkpoints.sqlite",
        "redis://localhost",
        "memory:/x",
        "sqlite://",
        "sqlite:///",
        "sqlite:relative.db",
        "blob://",
        "blob://a/b",
        "blob:checkpoints",
        "blob://Bad_Name",
    ],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        from_url(url, connection_string="UseDevelopmentStorage=true")


def test_a_non_string_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        from_url(None)  # type: ignore[arg-type]
