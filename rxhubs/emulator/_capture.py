"""Capture in the emulator: every partition's events written as Avro files, per time or size window.

As the service does, each partition has a window that opens when the previous one closed; it closes after
``window`` seconds or once ``size`` bytes of events arrived, whichever comes first, and is written as one file
named by the second it opened (``{Namespace}/{EventHub}/{PartitionId}/{Y}/{M}/{D}/{h}/{m}/{s}.avro``), with no
records when nothing arrived (the service's "empty files", on by default). Events are taken at append, before
the retention can drop them, so Capture holds everything the hub ever had. A window still open when the
emulator stops is written then; one open when the emulator is killed is lost to Capture (the hub still has it,
while retained). Record layout: :mod:`rxhubs.sources._capture_files`.

Targets: a folder, or a blob container (``blob://CONTAINER[/PREFIX]`` with a storage connection string).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import io
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rxhubs._capture_format import capture_time, file_name, write_file
from rxhubs.emulator import _delivery as dl
from rxhubs.emulator._codec import Timestamp, decode_value
from rxhubs.emulator._frames import (
    SEC_APPLICATION_PROPERTIES,
    SEC_DATA,
    SEC_MESSAGE_ANNOTATIONS,
    SEC_PROPERTIES,
    SEC_SEQUENCE,
    SEC_VALUE,
)
from rxhubs.emulator._message import _sections
from rxhubs.errors import ConfigurationError

if TYPE_CHECKING:
    from rxhubs.emulator._hub import Hub
    from rxhubs.emulator._hubs import Partition

__all__ = ["CaptureTarget", "CaptureWriter", "capture_target", "record_of_stored"]

_LOG = logging.getLogger("rxhubs.emulator")
UTC = _dt.UTC
DEFAULT_WINDOW = 300.0  # the service's default time window: 5 minutes
DEFAULT_SIZE = 300 * 1024 * 1024  # and size window: 300 MB
_OWN = frozenset(("x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time"))
_PROPERTY_NAMES = ("message-id", "user-id", "to", "subject", "reply-to", "correlation-id", "content-type",
                   "content-encoding", "absolute-expiry-time", "creation-time", "group-id", "group-sequence",
                   "reply-to-group-id")


class CaptureTarget(Protocol):
    """Where Capture files go."""

    async def open(self) -> None: ...

    async def write(self, name: str, data: bytes) -> None: ...

    async def close(self) -> None: ...


class FolderTarget:
    """Capture files in a local folder (each written whole, then renamed into place)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"FolderTarget({str(self.root)!r})"

    async def open(self) -> None:
        await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)

    async def write(self, name: str, data: bytes) -> None:
        await asyncio.to_thread(self._write, self.root / name, data)

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    async def close(self) -> None:
        return None


class BlobTarget:
    """Capture files in a blob container (Azurite or Azure Storage), through azure-storage-blob's aio client."""

    def __init__(self, connection_string: str, container: str, prefix: str = "") -> None:
        self._conn = connection_string
        self.container = container
        self.prefix = prefix.strip("/")
        self._client: Any = None

    def __repr__(self) -> str:  # never the connection string: it holds the account key
        return f"BlobTarget(container={self.container!r}, prefix={self.prefix!r})"

    async def open(self) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob.aio import ContainerClient

        self._client = ContainerClient.from_connection_string(self._conn, self.container)
        with contextlib.suppress(ResourceExistsError):
            await self._client.create_container()

    async def write(self, name: str, data: bytes) -> None:
        blob = f"{self.prefix}/{name}" if self.prefix else name
        await self._client.upload_blob(blob, data, overwrite=True)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def capture_target(where: str | Path, connection_string: str | None = None) -> CaptureTarget:
    """Where Capture writes: a folder, or ``blob://CONTAINER[/PREFIX]`` with a storage connection string.

    The connection string is the argument, else the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable.

    Raises:
        ConfigurationError: A blob URL without a connection string, or without a container.

    Example:
        >>> capture_target("/tmp/capture")
        FolderTarget('/tmp/capture')
        >>> capture_target("blob://capture/raw", "UseDevelopmentStorage=true")
        BlobTarget(container='capture', prefix='raw')
    """
    text = str(where)
    if not text.startswith("blob://"):
        return FolderTarget(Path(text))
    container, _, prefix = text[len("blob://"):].partition("/")
    if not container:
        raise ConfigurationError(f"bad capture URL {text!r}: expected blob://CONTAINER[/PREFIX]")
    conn = connection_string or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise ConfigurationError("a blob:// capture needs a storage connection string: pass "
                                 "capture_connection_string= (--capture-connection-string) or set "
                                 "AZURE_STORAGE_CONNECTION_STRING")
    return BlobTarget(conn, container, prefix)


def _text(value: Any) -> Any:
    """An AMQP value as the Avro unions take it: text, whole numbers (times in ms), floats, bytes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int | float | bytes):
        return int(value) if isinstance(value, int) else value
    return str(value)


def record_of_stored(sequence_number: int, offset: int, enqueued_ms: int, head: bytes, body: bytes) -> dict[str, Any]:
    """The Capture record of an event as the emulator stores it (a transfer frame's head and body)."""
    buf = dl.message_of(head, body)
    system: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    data: list[bytes] = []
    value: Any = None
    for code, _pos, start, stop in _sections(buf):
        if code == SEC_DATA:
            chunk, _ = decode_value(buf, start, stop, 1)
            data.append(bytes(chunk))
        elif code == SEC_MESSAGE_ANNOTATIONS:
            ann, _ = decode_value(buf, start, stop, 1)
            for k, v in (ann or {}).items():
                if str(k) not in _OWN and v is not None:
                    system[str(k)] = _text(v)
        elif code == SEC_PROPERTIES:
            fields, _ = decode_value(buf, start, stop, 1)
            for name, v in zip(_PROPERTY_NAMES, fields or (), strict=False):
                if v is not None:
                    system[name] = _text(v)
        elif code == SEC_APPLICATION_PROPERTIES:
            app, _ = decode_value(buf, start, stop, 1)
            properties = {str(k): None if v is None else _text(v) for k, v in (app or {}).items()}
        elif code in (SEC_VALUE, SEC_SEQUENCE):
            value, _ = decode_value(buf, start, stop, 1)
    if data:
        payload: bytes | None = b"".join(data)
    elif value is None:
        payload = None
    else:
        payload = value if isinstance(value, bytes) else str(value).encode("utf-8")
    when = _dt.datetime.fromtimestamp(Timestamp(enqueued_ms) / 1000, UTC)
    return {"SequenceNumber": sequence_number, "Offset": str(offset), "EnqueuedTimeUtc": capture_time(when),
            "SystemProperties": system, "Properties": properties, "Body": payload}


@dataclass
class _Window:
    """One partition's open window: when it opened, and the events taken since (stored form)."""

    opened: _dt.datetime
    deadline: float  # monotonic
    events: list[tuple[int, int, int, bytes, bytes]] = field(default_factory=list)
    size: int = 0


def _second(now: _dt.datetime) -> _dt.datetime:
    return now.replace(microsecond=0)


class CaptureWriter:
    """Writes each partition of ``hubs`` to ``target``, a file per window (see the module)."""

    def __init__(self, hubs: dict[str, Hub], target: CaptureTarget, namespace: str, window: float = DEFAULT_WINDOW,
                 size: int = DEFAULT_SIZE) -> None:
        if not window > 0:
            raise ConfigurationError(f"capture_window must be a number of seconds > 0, got {window!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"capture_size must be a whole number of bytes >= 1, got {size!r}")
        self.hubs = hubs
        self.target = target
        self.namespace = namespace
        self.window = float(window)
        self.size = size
        self.files_written = 0
        self._windows: dict[tuple[str, str], _Window] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def _attach(self) -> None:
        """Take every partition's appends from now on (partitions added later are picked up on each round)."""
        for hub in self.hubs.values():
            for part in hub.partitions.values():
                key = (hub.name, part.partition_id)
                if key not in self._windows:
                    self._windows[key] = self._open_window(_second(_dt.datetime.now(UTC)))
                    part.listeners.append(self._on_append)

    def _open_window(self, opened: _dt.datetime) -> _Window:
        return _Window(opened, time.monotonic() + self.window)

    def _on_append(self, part: Partition, first_seq: int, count: int) -> None:
        window = self._windows[(part.hub, part.partition_id)]
        lo = first_seq - part.base
        for i in range(lo, lo + count):
            head, body = part.heads[i], part.bodies[i]
            window.events.append((part.base + i, part.offsets[i], part.times[i], head, body))
            window.size += len(head) + len(body)
        if window.size >= self.size:
            window.deadline = 0.0
            self._wake.set()

    async def start(self) -> None:
        await self.target.open()
        self._attach()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="emulator-capture")

    async def _run(self) -> None:
        while not self._stopping:
            self._attach()
            now = time.monotonic()
            due = [key for key, w in self._windows.items() if w.deadline <= now]
            for key in due:
                await self._flush(key)
            if not due and not self._stopping:
                soonest = min((w.deadline for w in self._windows.values()), default=now + self.window)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.0, soonest - time.monotonic()))

    async def _flush(self, key: tuple[str, str]) -> None:
        window = self._windows[key]
        now = _second(_dt.datetime.now(UTC))
        # the next window opens now, but never on the second this one's file is named after (no overwrite)
        self._windows[key] = self._open_window(max(now, window.opened + _dt.timedelta(seconds=1)))
        hub, pid = key
        name = file_name(self.namespace, hub, pid, window.opened)
        try:
            data = await asyncio.to_thread(self._encode, window.events)
            await self.target.write(name, data)
        except Exception:  # a failed write must not stop Capture of the other partitions
            _LOG.exception("capture: cannot write %s (%d events); they are missing from Capture", name,
                           len(window.events))
            return
        self.files_written += 1

    @staticmethod
    def _encode(events: list[tuple[int, int, int, bytes, bytes]]) -> bytes:
        out = io.BytesIO()
        write_file(out, (record_of_stored(*e) for e in events))
        return out.getvalue()

    async def stop(self) -> None:
        """Write every open window (the files a graceful stop owes) and stop."""
        task, self._task = self._task, None
        self._stopping = True
        self._wake.set()
        if task is not None:  # it finishes the file it is writing
            with contextlib.suppress(Exception):
                await task
        for key, window in list(self._windows.items()):
            if window.events:
                await self._flush(key)
        await self.target.close()
