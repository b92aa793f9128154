"""Checkpoint stores: ownership and checkpoints for consumer groups, behind one contract.

Every store keeps the contract of :class:`CheckpointStore` (see ``docs/stores.md``); the first three are also
fenced (:class:`FencedCheckpointStore`: a former owner's checkpoint writes fail) and keep operator state with
the checkpoint (:class:`StatefulCheckpointStore`):

* :class:`InMemoryCheckpointStore`: tests and single-process use; runs in virtual time; fault injection.
* :class:`SqliteCheckpointStore`: the durable embedded default; local processes balance through one file.
* :class:`BlobCheckpointStore`: Azure Blob Storage, in the official ``azure-eventhub-checkpointstoreblob``
  layout, so a consumer group moves between rxhubs and the SDK's ``EventProcessor`` either way.
* :class:`SdkCheckpointStore`: wraps any store written for the Azure SDK's ``CheckpointStore`` interface.

:func:`from_url` builds one from a URL (what the command line takes); :func:`as_checkpoint_store` accepts
either kind of store. ``azure.storage.blob`` is imported only when the blob store is first used.

Example:
    >>> from rxhubs import stores
    >>> stores.from_url("memory:")
    InMemoryCheckpointStore(ownership=0, checkpoints=0, available=True)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from rxhubs.errors import ConfigurationError
from rxhubs.stores._contract import (
    CheckpointStore,
    FencedCheckpointStore,
    SdkStyleCheckpointStore,
    StatefulCheckpointStore,
    StoreLike,
    is_fenced,
    is_stateful,
)
from rxhubs.stores._memory import InMemoryCheckpointStore
from rxhubs.stores._sdk import SdkCheckpointStore, as_checkpoint_store
from rxhubs.stores._sqlite import SqliteCheckpointStore

if TYPE_CHECKING:
    from rxhubs.stores._blob import BlobCheckpointStore

__all__ = [
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

#: The environment variable :func:`from_url` reads the storage connection string from for ``blob://``.
CONNECTION_STRING_VARIABLE = "AZURE_STORAGE_CONNECTION_STRING"


def __getattr__(name: str) -> Any:
    if name == "BlobCheckpointStore":  # azure.storage.blob.aio takes ~0.4 s to import: only when used
        from rxhubs.stores._blob import BlobCheckpointStore

        return BlobCheckpointStore
    raise AttributeError(f"module 'rxhubs.stores' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def from_url(url: str, **kwargs: Any) -> CheckpointStore:
    """A store from a URL, as the command line takes it.

    * ``memory:`` - :class:`InMemoryCheckpointStore` (lost when the process ends);
    * ``sqlite:///relative/path.sqlite`` or ``sqlite:////absolute/path.sqlite`` (SQLAlchemy's convention:
      three slashes then the path) - :class:`SqliteCheckpointStore`;
    * ``blob://CONTAINER`` - :class:`BlobCheckpointStore` on the storage account of the connection string
      given as ``connection_string=...`` or in ``AZURE_STORAGE_CONNECTION_STRING``.

    Other keyword arguments go to the store's constructor.

    Args:
        url: The store URL.
        **kwargs: ``connection_string`` for ``blob://``; the rest to the store.

    Raises:
        ConfigurationError: For an unknown scheme, a missing path or container, or no connection string.

    Example:
        >>> from_url("sqlite:///.rxhubs/checkpoints.sqlite")  # doctest: +SKIP
        SqliteCheckpointStore('.rxhubs/checkpoints.sqlite')
        >>> from_url("blob://checkpoints", connection_string="UseDevelopmentStorage=true")
        BlobCheckpointStore('http://127.0.0.1:10000/devstoreaccount1/checkpoints')
        >>> from_url("redis://localhost")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: unknown checkpoint store URL 'redis://localhost': ...
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"a checkpoint store URL must be a string, got {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    scheme = scheme.strip().lower()
    usage = "use memory:, sqlite:///PATH or blob://CONTAINER"
    if not sep:
        raise ConfigurationError(f"not a checkpoint store URL: {url!r} ({usage})")
    if scheme == "memory":
        if rest not in ("", "//", "///"):
            raise ConfigurationError(f"memory: takes no path, got {url!r}")
        return InMemoryCheckpointStore(**kwargs)
    if scheme == "sqlite":
        if not rest.startswith("///") or rest == "///":
            raise ConfigurationError(
                f"a SQLite store URL is sqlite:///relative/path or sqlite:////absolute/path, got {url!r}"
            )
        return SqliteCheckpointStore(unquote(rest[3:]), **kwargs)
    if scheme == "blob":
        container = rest[2:] if rest.startswith("//") else ""
        container = container.rstrip("/")
        if not container or "/" in container or "?" in container:
            raise ConfigurationError(f"a blob store URL is blob://CONTAINER, got {url!r}")
        conn_str = kwargs.pop("connection_string", None) or os.environ.get(CONNECTION_STRING_VARIABLE)
        if not conn_str:
            raise ConfigurationError(
                f"blob://{container} needs a storage connection string: set {CONNECTION_STRING_VARIABLE} "
                "(or pass connection_string=...)"
            )
        from rxhubs.stores._blob import BlobCheckpointStore

        return BlobCheckpointStore.from_connection_string(conn_str, container, **kwargs)
    raise ConfigurationError(f"unknown checkpoint store URL {url!r}: {usage}")
