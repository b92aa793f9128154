"""Run an :class:`Emulator` on its own event loop in a background thread (for sync code and test fixtures)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from rxhubs.emulator._emulator import Emulator
from rxhubs.emulator._fault_state import LinkRecord
from rxhubs.emulator._faults import EmulatorFaults
from rxhubs.errors import EmulatorError

_START_TIMEOUT = 30.0


class BackgroundEmulator:
    """An emulator served by a private event loop in a daemon thread; usable from sync and async code alike.

    Args:
        hubs: Event hub names and partition counts.
        **options: Any other :class:`Emulator` argument (``host``, ``port``, ``data_dir``, ``consumer_groups``...).

    Example:
        >>> from rxhubs.emulator import BackgroundEmulator
        >>> with BackgroundEmulator({"telemetry": 2}) as emulator:
        ...     emulator.connection_string("telemetry").startswith("Endpoint=sb://127.0.0.1:")
        True
    """

    def __init__(self, hubs: Mapping[str, int], **options: Any) -> None:
        self._hubs = dict(hubs)
        self._options = dict(options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.emulator: Emulator | None = None

    def __repr__(self) -> str:
        return f"BackgroundEmulator({self.emulator!r})"

    @property
    def port(self) -> int:
        """The port the emulator listens on."""
        return self._running().port

    @property
    def data_dir(self) -> Path | None:
        """The emulator's data directory (None: in memory)."""
        return self._running().data_dir

    @property
    def websocket_port(self) -> int | None:
        """The port serving AMQP over WebSockets (None: none served)."""
        return self._running().websocket_port

    @property
    def websocket_endpoint(self) -> str | None:
        """The SDK's ``custom_endpoint_address`` for AMQP over WebSockets (see :attr:`Emulator.websocket_endpoint`)."""
        return self._running().websocket_endpoint

    @property
    def faults(self) -> EmulatorFaults:
        """Fault control of the running emulator (see :class:`EmulatorFaults`); safe from any thread."""
        return self._running().faults

    @property
    def link_log(self) -> list[LinkRecord]:
        """The running emulator's consumer link log (see :attr:`Emulator.link_log`)."""
        return self._running().link_log

    @property
    def control_address(self) -> str | None:
        """``127.0.0.1:PORT`` of the fault control API, or None (see :attr:`Emulator.control_address`)."""
        return self._running().control_address

    def connection_string(self, hub: str, key_name: str | None = None) -> str:
        """A connection string for ``hub`` (see :meth:`Emulator.connection_string`)."""
        return self._running().connection_string(hub, key_name)

    def tls_connection_string(self, hub: str) -> str:
        """A connection string for ``hub`` over TLS (see :meth:`Emulator.tls_connection_string`)."""
        return self._running().tls_connection_string(hub)

    @property
    def schema_registry_namespace(self) -> str | None:
        """The Schema Registry's ``fully_qualified_namespace`` (see :attr:`Emulator.schema_registry_namespace`)."""
        return self._running().schema_registry_namespace

    def tls_client_options(self) -> dict[str, str]:
        """The azure-eventhub client options for TLS (see :meth:`Emulator.tls_client_options`)."""
        return self._running().tls_client_options()

    def _running(self) -> Emulator:
        if self.emulator is None:
            raise EmulatorError("the background emulator is not running")
        return self.emulator

    def start(self) -> BackgroundEmulator:
        """Start the loop thread and the emulator on it."""
        if self.emulator is not None:
            raise EmulatorError("the background emulator is already running")
        emulator = Emulator(self._hubs, **self._options)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="rxhubs-emulator", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(emulator.start(), loop).result(_START_TIMEOUT)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            raise
        self._loop, self._thread, self.emulator = loop, thread, emulator
        return self

    def stop(self) -> None:
        """Stop the emulator (closing every connection) and its loop thread."""
        loop, thread, emulator = self._loop, self._thread, self.emulator
        self._loop = self._thread = self.emulator = None
        if loop is None or thread is None or emulator is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(emulator.stop(), loop).result(_START_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_START_TIMEOUT)
            loop.close()

    def restart(self) -> BackgroundEmulator:
        """Stop and start again on the same port (and data directory): what a service restart looks like."""
        port, websocket_port, control = self.port, self.websocket_port, self.control_address
        self.stop()
        self._options["port"] = port
        if websocket_port is not None:
            self._options["websocket_port"] = websocket_port
        if control is not None:
            self._options["control_port"] = int(control.rsplit(":", 1)[1])
        return self.start()

    def __enter__(self) -> BackgroundEmulator:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
