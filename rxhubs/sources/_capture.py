"""``rxhubs.sources.Capture``: the Event Hubs Capture files of one hub, read partition by partition, in order.

Capture files live in a folder or a blob container, under ``{Namespace}/{EventHub}/{PartitionId}/{Y}/{M}/{D}/
{h}/{m}/{s}.avro``. A :class:`Capture` names where (the root above the namespaces, or a hub's own folder) and
lists one partition's files in time order; :meth:`Capture.read` gives that partition's events from a sequence
number on, file by file, as :class:`~rxhubs.Event` lists. Events are what the files hold: a captured event's
enqueued time is known to the second (``EnqueuedTimeUtc``).
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from rxhubs._capture_format import file_time, read_records
from rxhubs._models import Event
from rxhubs.errors import ConfigurationError
from rxhubs.sources._capture_files import captured_events

__all__ = ["Capture", "CaptureFiles"]


class CaptureFiles(Protocol):
    """Where Capture files are: list a partition's file names (in time order) and read one."""

    async def partition_files(self, eventhub_name: str, partition_id: str) -> list[str]: ...

    async def read(self, name: str) -> bytes: ...

    async def close(self) -> None: ...


def _partition_file(parts: tuple[str, ...], eventhub_name: str, partition_id: str, namespace: str | None) -> bool:
    """Whether a file's path parts (below the root) name a Capture file of this hub and partition.

    ``parts`` ends ``[..., namespace, hub, pid, Y, M, D, h, m, s.avro]``; the hub and namespace may be above the
    root (a hub's own folder given).
    """
    if len(parts) < 7 or parts[-7] != partition_id:
        return False
    if len(parts) >= 8 and parts[-8].casefold() != eventhub_name.casefold():
        return False
    return namespace is None or len(parts) < 9 or parts[-9].casefold() == namespace.casefold()


def _in_time_order(names: list[str]) -> list[str]:
    dated = [(t, n) for n in names if (t := file_time(n)) is not None]
    return [n for _, n in sorted(dated)]


class _Folder:
    def __init__(self, root: Path, namespace: str | None) -> None:
        self.root = root
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"folder {str(self.root)!r}"

    async def partition_files(self, eventhub_name: str, partition_id: str) -> list[str]:
        return await asyncio.to_thread(self._list, eventhub_name, partition_id)

    def _list(self, eventhub_name: str, partition_id: str) -> list[str]:
        found: list[str] = []
        for folder, _dirs, files in os.walk(self.root):
            for f in files:
                if f.endswith(".avro"):
                    rel = Path(folder, f).relative_to(self.root).parts
                    if _partition_file(rel, eventhub_name, partition_id, self.namespace):
                        found.append("/".join(rel))
        return _in_time_order(found)

    async def read(self, name: str) -> bytes:
        return await asyncio.to_thread((self.root / name).read_bytes)

    async def close(self) -> None:
        return None


class _Container:
    def __init__(self, connection_string: str | None, container: str, prefix: str, namespace: str | None,
                 account_url: str | None = None, credential: Any = None) -> None:
        self._conn = connection_string
        self._account_url = account_url
        self._credential = credential
        self.container = container
        self.prefix = prefix.strip("/")
        self.namespace = namespace
        self._client: Any = None

    def __repr__(self) -> str:  # never the connection string
        return f"container {self.container!r}" + (f" prefix {self.prefix!r}" if self.prefix else "")

    def _open(self) -> Any:
        if self._client is None:
            from azure.storage.blob.aio import ContainerClient

            if self._conn is not None:
                self._client = ContainerClient.from_connection_string(self._conn, self.container)
            else:
                self._client = ContainerClient(str(self._account_url), self.container, credential=self._credential)
        return self._client

    async def partition_files(self, eventhub_name: str, partition_id: str) -> list[str]:
        client = self._open()
        start = f"{self.prefix}/" if self.prefix else ""
        found: list[str] = []
        async for blob in client.list_blobs(name_starts_with=start or None):
            rel = tuple(blob.name[len(start):].split("/"))
            if rel[-1].endswith(".avro") and _partition_file(rel, eventhub_name, partition_id, self.namespace):
                found.append(blob.name)
        return _in_time_order(found)

    async def read(self, name: str) -> bytes:
        downloader = await self._open().download_blob(name)
        data: bytes = await downloader.readall()
        return data

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class Capture:
    """The Event Hubs Capture files of one hub (Avro), to read past the hub's retention.

    Pass it to :func:`rxhubs.consume` as ``backfill=``: a partition whose start lies before what the hub retains
    is read from these files first, then from the hub, from the next sequence number (``docs/history.md``).

    Args:
        location: A folder (the Capture root above ``{Namespace}``, or a hub's own folder), ``blob://CONTAINER
            [/PREFIX]`` (with ``connection_string`` or ``AZURE_STORAGE_CONNECTION_STRING``), or
            ``https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX]`` (with ``credential``).
        namespace: Read only this ``{Namespace}`` (default: any; give it when one root holds several).
        connection_string: The storage account of a ``blob://`` location (never logged).
        credential: The credential of an ``https://`` location (a SAS string, a key, an Azure credential).
        patience: Seconds the backfill waits for Capture to reach what the hub retains (Capture writes a file
            per window, so it trails the hub) before a gap is reported as
            :class:`~rxhubs.errors.CaptureGapError`.
        poll_interval: Seconds between looks for new files while waiting.

    Raises:
        ConfigurationError: A location of no known form, or a blob location without credentials.

    Example:
        >>> Capture("capture/")
        Capture(folder 'capture')
        >>> Capture("blob://capture/raw", connection_string="UseDevelopmentStorage=true")
        Capture(container 'capture' prefix 'raw')
    """

    def __init__(self, location: str | Path, *, namespace: str | None = None, connection_string: str | None = None,
                 credential: Any = None, patience: float = 600.0, poll_interval: float = 5.0) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int | float) or patience < 0:
            raise ConfigurationError(f"patience must be a number of seconds >= 0, got {patience!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, int | float) or not poll_interval > 0:
            raise ConfigurationError(f"poll_interval must be a number of seconds > 0, got {poll_interval!r}")
        self.patience = float(patience)
        self._firsts: dict[str, int | None] = {}
        self._last: tuple[str, list[Event]] | None = None  # the file read last, decoded
        self.poll_interval = float(poll_interval)
        text = str(location)
        self.files: CaptureFiles
        if text.startswith("blob://"):
            container, _, prefix = text[len("blob://"):].partition("/")
            conn = connection_string or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
            if not container or not conn:
                raise ConfigurationError("a blob:// Capture location needs a container and a connection string "
                                         "(connection_string= or AZURE_STORAGE_CONNECTION_STRING)")
            self.files = _Container(conn, container, prefix, namespace)
        elif text.startswith("https://"):
            account, _, path = text[len("https://"):].partition("/")
            container, _, prefix = path.partition("/")
            if not container:
                raise ConfigurationError(f"bad Capture URL {text!r}: expected https://ACCOUNT/CONTAINER[/PREFIX]")
            self.files = _Container(None, container, prefix, namespace, f"https://{account}", credential)
        else:
            self.files = _Folder(Path(text), namespace)

    def __repr__(self) -> str:
        return f"Capture({self.files!r})"

    async def partition_files(self, eventhub_name: str, partition_id: str) -> list[str]:
        """The names of one partition's Capture files, oldest first."""
        return await self.files.partition_files(eventhub_name, partition_id)

    async def events(self, name: str) -> list[Event]:
        """The events of one Capture file, in order.

        Raises:
            ValueError: The file is not a readable Avro container (its name in the message).
        """
        last = self._last
        if last is not None and last[0] == name:  # a file looked at (its first event) and then read
            return last[1]
        data = await self.files.read(name)
        try:
            events = await asyncio.to_thread(_decode, data)
        except Exception as exc:
            raise ValueError(f"Capture file {name!r} cannot be read: {exc}") from exc
        self._last = (name, events)
        if name not in self._firsts:
            self._firsts[name] = events[0].sequence_number if events else None
        return events

    async def first_sequence_number(self, name: str) -> int | None:
        """The sequence number of a file's first event (None: an empty file); remembered per file name."""
        if name not in self._firsts:
            data = await self.files.read(name)
            try:
                self._firsts[name] = await asyncio.to_thread(_first, data)
            except Exception as exc:
                raise ValueError(f"Capture file {name!r} cannot be read: {exc}") from exc
        return self._firsts[name]

    async def skip_before(self, files: list[str], sequence_number: int) -> int:
        """The index of the last file that can hold ``sequence_number`` (files before it hold earlier events).

        A binary search over the files' first sequence numbers (an empty file counts as the next non-empty one).
        """
        lo, hi = 0, len(files)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            j, first = mid, None
            while j < hi and (first := await self.first_sequence_number(files[j])) is None:
                j += 1
            if first is None or first > sequence_number:
                hi = mid
            else:
                lo = j
        return lo

    @staticmethod
    def skip_before_time(files: list[str], when: Any) -> int:
        """The index of a file before which every file holds events enqueued before ``when``'s second only.

        The file before the last one opened at or before ``when``: an event appended in the second a window
        closed may sit in the file before the one named after that second.
        """
        index = 0
        for i, name in enumerate(files):
            opened = file_time(name)
            if opened is not None and opened <= when:
                index = i
        return max(0, index - 1)

    async def read(self, eventhub_name: str, partition_id: str, first: int = 0) -> AsyncIterator[list[Event]]:
        """One partition's events from sequence number ``first`` on, a list per file (files read in order).

        Example:
            >>> import asyncio
            >>> async def count() -> int:
            ...     return sum([len(e) async for e in Capture("no-such-folder").read("telemetry", "0")])
            >>> asyncio.run(count())
            0
        """
        files = await self.partition_files(eventhub_name, partition_id)
        for name in files[await self.skip_before(files, first) if first > 0 else 0:]:
            events = await self.events(name)
            if events and events[-1].sequence_number >= first:
                yield [e for e in events if e.sequence_number >= first]

    async def close(self) -> None:
        """Close the storage client (a blob location)."""
        await self.files.close()


def _first(data: bytes) -> int | None:
    """The first record's sequence number (only it is decoded); None for an empty file."""
    for record in read_records(io.BytesIO(data)):
        return int(record["SequenceNumber"])
    return None


def _decode(data: bytes) -> list[Event]:
    return captured_events(read_records(io.BytesIO(data)))
