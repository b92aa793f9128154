"""What the emulator keeps of the past: retention (expiry, also of an idle hub) and Capture, run beside the server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path

from rxhubs.emulator._capture import DEFAULT_SIZE, DEFAULT_WINDOW, CaptureTarget, CaptureWriter, capture_target
from rxhubs.emulator._hub import Hub
from rxhubs.emulator._retention import Retention, retention_of
from rxhubs.errors import ConfigurationError

__all__ = ["History"]

SWEEP_INTERVAL = 1.0  # seconds between expiry rounds of hubs retained by time


class History:
    """The emulator's retention and Capture settings, checked at construction, and their background work."""

    def __init__(
        self,
        hubs: Mapping[str, int],
        retention: float | Mapping[str, float] | None = None,
        retain_events: int | Mapping[str, int] | None = None,
        capture: str | Path | None = None,
        capture_window: float = DEFAULT_WINDOW,
        capture_size: int = DEFAULT_SIZE,
        capture_namespace: str = "emulator",
        capture_connection_string: str | None = None,
    ) -> None:
        self.retention: dict[str, Retention] = retention_of(hubs, retention, retain_events)
        if isinstance(capture_window, bool) or not isinstance(capture_window, int | float) or not capture_window > 0:
            raise ConfigurationError(f"capture_window must be a number of seconds > 0, got {capture_window!r}")
        if isinstance(capture_size, bool) or not isinstance(capture_size, int) or capture_size < 1:
            raise ConfigurationError(f"capture_size must be a whole number of bytes >= 1, got {capture_size!r}")
        if not isinstance(capture_namespace, str) or not capture_namespace or "/" in capture_namespace:
            raise ConfigurationError(f"capture_namespace must be a name without '/', got {capture_namespace!r}")
        self.target: CaptureTarget | None = (
            capture_target(capture, capture_connection_string) if capture is not None else None)
        self.capture_window = float(capture_window)
        self.capture_size = capture_size
        self.capture_namespace = capture_namespace
        self.writer: CaptureWriter | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, hubs: dict[str, Hub]) -> None:
        """Start Capture (when configured) and the expiry rounds (when a hub is retained by time)."""
        if self.target is not None:
            writer = CaptureWriter(hubs, self.target, self.capture_namespace, self.capture_window, self.capture_size)
            await writer.start()
            self.writer = writer
        if any(r.seconds is not None for r in self.retention.values()):
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(hubs), name="emulator-retention")

    @staticmethod
    async def _sweep(hubs: dict[str, Hub]) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            for hub in hubs.values():
                if hub.retention.seconds is not None:
                    for part in list(hub.partitions.values()):
                        part.expire()

    async def stop(self) -> None:
        """Write Capture's open windows and stop."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        writer, self.writer = self.writer, None
        if writer is not None:
            await writer.stop()
