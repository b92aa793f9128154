"""Start and stop the Azurite blob emulator (npm ``azurite``) for tests and benchmarks.

Azurite is installed by the project's set-up (``make test`` runs ``npm install``, which reads the repository's
``package.json``); this module runs ``node_modules/.bin/azurite-blob`` directly, on a loopback port, with
telemetry off, and can stop and restart it on the same port and data so fault tests can simulate an outage.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from rxhubs.errors import EmulatorError

__all__ = ["ACCOUNT_KEY", "ACCOUNT_NAME", "Azurite", "AzuriteNotInstalledError", "find_azurite"]

#: The well-known development account of Azurite (public, documented by Microsoft; not a secret).
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_BINARY = Path("node_modules") / ".bin" / "azurite-blob"


class AzuriteNotInstalledError(EmulatorError):
    """``node_modules/.bin/azurite-blob`` was not found: run ``make test`` (or ``npm install``) first."""


def find_azurite(start: Path | None = None) -> Path:
    """The ``azurite-blob`` launcher of the nearest ``node_modules`` above ``start`` (or the repository).

    Searches from ``start`` (default: the current directory) and from this package's checkout upwards.

    Raises:
        AzuriteNotInstalledError: If no installed Azurite is found.

    Example:
        >>> find_azurite().name  # doctest: +SKIP
        'azurite-blob'
    """
    roots = [Path(start) if start is not None else Path.cwd(), Path(__file__).resolve().parent]
    for root in roots:
        for folder in (root.resolve(), *root.resolve().parents):
            candidate = folder / _BINARY
            if candidate.exists():
                return candidate
    raise AzuriteNotInstalledError(
        "Azurite is not installed (no node_modules/.bin/azurite-blob): run `make test` from the repository "
        "root, which runs `npm install --no-audit --no-fund` for the pinned azurite@3.35.0"
    )


def _die_with_parent() -> None:
    """In the child, before exec (Linux): get SIGTERM when the process that started Azurite dies.

    atexit does not run when the parent is killed by a signal (a CI timeout, kill -9); this does. The signal
    comes when the *thread* that started Azurite ends, so start it from a long-lived thread (the main one).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - best effort
        pass


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Azurite:
    """An Azurite blob service on loopback, as a child process.

    Args:
        port: The port to listen on; 0 picks a free one at the first start (and keeps it for restarts).
        location: Folder for Azurite's data; default a temporary folder removed by :meth:`close`.
        binary: The ``azurite-blob`` launcher; default found with :func:`find_azurite`.
        host: The address to bind, loopback by default.
        startup_timeout: Seconds to wait for the port to accept connections.

    Example:
        >>> with Azurite() as azurite:  # doctest: +SKIP
        ...     store = BlobCheckpointStore.from_connection_string(azurite.connection_string, "checkpoints")
    """

    def __init__(
        self,
        *,
        port: int = 0,
        location: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
    ) -> None:
        self.binary = Path(binary) if binary is not None else find_azurite()
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self._own_location = location is None
        self.location = Path(location) if location is not None else Path(tempfile.mkdtemp(prefix="rxhubs-azurite-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = self.location / "azurite.log"
        self._atexit = False

    @property
    def connection_string(self) -> str:
        """The explicit devstoreaccount1 connection string (works with azure-storage-blob and the official store)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def blob_endpoint(self) -> str:
        """The blob service URL of the development account."""
        return f"http://{self.host}:{self.port}/{ACCOUNT_NAME}"

    @property
    def running(self) -> bool:
        """True while the child process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start Azurite (a no-op if it is running) and wait until it accepts connections.

        Raises:
            EmulatorError: If it exits or does not listen within ``startup_timeout`` seconds.
        """
        if self.running:
            return
        if self.port == 0:
            self.port = _free_port(self.host)
        self.location.mkdir(parents=True, exist_ok=True)
        command = [
            str(self.binary),
            "--blobHost",
            self.host,
            "--blobPort",
            str(self.port),
            "--location",
            str(self.location),
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
        ]
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        if not self._atexit:
            atexit.register(self.stop)  # never leave an orphan Azurite behind, even if close() is forgotten
            self._atexit = True
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmulatorError(
                    f"Azurite exited with code {self._process.returncode} at start-up: {self._log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise EmulatorError(f"Azurite did not listen on {self.host}:{self.port} within {self.startup_timeout}s")

    def stop(self) -> None:
        """Stop Azurite (terminate, then kill after 5 s); its data stays for a later :meth:`start`."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def close(self) -> None:
        """Stop Azurite and remove its data folder if this object created it."""
        self.stop()
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False
        if self._own_location:
            shutil.rmtree(self.location, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-2000:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def __enter__(self) -> Azurite:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Azurite(endpoint={self.blob_endpoint!r}, running={self.running})"
