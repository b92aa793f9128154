"""Pytest plugin: a real PostgreSQL server (the machine's Debian ``postgresql-15``) for the whole session.

Register it in the root conftest (``pytest_plugins = [..., "tests.support.postgres"]``). The server is never
skipped: if its binaries are missing the fixture fails and says which package to install. It runs as the
``postgres`` user when the suite runs as root (``initdb`` refuses root), on a free loopback port
(``listen_addresses=127.0.0.1``), with its unix socket and data in a temporary directory that is removed at the
end, and trusts every connection: it is a test cluster, reachable only from this machine. Durability is off
(``fsync=off``): tests kill connections, never the server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _bin_dir() -> Path:
    """``RXHUBS_PG_BIN``, else the newest of Debian's ``/usr/lib/postgresql/N/bin``, else initdb's on PATH."""
    if os.environ.get("RXHUBS_PG_BIN"):
        return Path(os.environ["RXHUBS_PG_BIN"])
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                    if p.parent.name.isdigit() else 0)
    on_path = shutil.which("initdb")
    return debian[-1] if debian else Path(on_path).parent if on_path else Path("/usr/lib/postgresql/15/bin")


#: Where the server is (Debian's ``apt-get install postgresql`` on the CI image: version 15).
PG_BIN = _bin_dir()
_READY_TIMEOUT = 60.0


class PostgresNotInstalledError(RuntimeError):
    """The server binaries (initdb, postgres) are not where :data:`PG_BIN` says."""


class Postgres:
    """A throwaway PostgreSQL cluster: ``start()``, ``database()`` for a fresh database, ``close()``."""

    def __init__(self, bin_dir: Path = PG_BIN) -> None:
        missing = [n for n in ("initdb", "postgres") if not (bin_dir / n).is_file()]
        if missing:
            raise PostgresNotInstalledError(
                f"PostgreSQL server binaries {missing} not found in {bin_dir} (install Debian's `postgresql`, or "
                "set RXHUBS_PG_BIN to the directory holding initdb and postgres)")
        self.bin_dir = bin_dir
        self._as = _run_as()
        self.host, self.port, self.user = "127.0.0.1", 0, "postgres"
        self.root = Path(tempfile.mkdtemp(prefix="rxhubs-pg-"))  # under /tmp: pytest's tmp dirs are root-only
        self._process: subprocess.Popen[bytes] | None = None

    def _popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        uid, gid = self._as
        return subprocess.Popen(args, preexec_fn=(lambda: (os.setgid(gid), os.setuid(uid))) if uid else None,
                                env={**os.environ, "LC_ALL": "C.UTF-8"}, **kwargs)

    def start(self) -> None:
        uid, gid = self._as
        data, sockets, log = self.root / "data", self.root / "socket", self.root / "server.log"
        sockets.mkdir()
        for path in (self.root, sockets):
            os.chown(path, uid or os.getuid(), gid or os.getgid())
        init = self._popen([str(self.bin_dir / "initdb"), "-D", str(data), "-U", self.user, "-A", "trust",
                            "-E", "UTF8", "--no-sync", "--no-instructions"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = init.communicate(timeout=120)
        if init.returncode:
            raise RuntimeError(f"initdb failed ({init.returncode}): {out.decode(errors='replace')[-2000:]}")
        (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        self.port = _free_port()
        with open(log, "wb") as sink:
            self._process = self._popen(
                [str(self.bin_dir / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(sockets),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=60", "-c", "shared_buffers=16MB",
                 "-c", "deadlock_timeout=200ms"],
                stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _READY_TIMEOUT
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"postgres exited ({self._process.returncode}): {log.read_text()[-2000:]}")
            try:
                with self.admin() as connection:
                    connection.run("SELECT 1")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def admin(self, database: str = "postgres") -> Any:
        """A pg8000 native connection in autocommit (every statement on its own), as the superuser."""
        import pg8000.native

        return pg8000.native.Connection(self.user, host=self.host, port=self.port, database=database, timeout=30)

    def database(self) -> str:
        """A new, empty database; its name."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self.admin() as connection:
            connection.run(f"CREATE DATABASE {name}")
        return name

    def url(self, database: str) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DATABASE``."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def terminate(self, pid: int) -> bool:
        """``pg_terminate_backend(pid)``, waiting until that backend is gone; whether it was there."""
        with self.admin() as connection:
            [[done]] = connection.run("SELECT pg_terminate_backend(CAST(:pid AS int), 10000)", pid=pid)
        return bool(done)

    def close(self) -> None:
        """Stop the server (fast shutdown: connections are ended) and remove its directory."""
        process, self._process = self._process, None
        try:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run_as() -> tuple[int, int]:
    """(uid, gid) of ``postgres`` when running as root, else (0, 0): run as oneself."""
    if os.geteuid() != 0:
        return 0, 0
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise PostgresNotInstalledError("running as root, and there is no `postgres` user to run the server as "
                                        "(initdb refuses root; Debian's `postgresql` package creates it)") from exc
    return entry.pw_uid, entry.pw_gid


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A running PostgreSQL server on a free loopback port, for the session (``.database()`` for a fresh one)."""
    try:
        server = Postgres()
    except PostgresNotInstalledError as exc:
        pytest.fail(f"{exc} (the PostgreSQL tests need a real server; they are never skipped)", pytrace=False)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_database(postgres: Postgres) -> str:
    """A fresh database no other test uses (its name)."""
    return postgres.database()


