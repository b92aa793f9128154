"""The SQL sink on PostgreSQL from a URL: :func:`postgresql` (psycopg 3 or pg8000, whichever is installed)."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from rxhubs.errors import ConfigurationError
from rxhubs.tables._sql import SqlSink

__all__ = ["postgresql"]

Driver = Literal["psycopg", "pg8000"]


def postgresql(
    url: str,
    *,
    table: str = "rxhubs_events",
    positions_table: str = "rxhubs_positions",
    driver: Driver | None = None,
) -> SqlSink:
    """A :class:`SqlSink` on the PostgreSQL database ``url`` names (``postgresql://user:password@host:port/db``).

    Opens its connection with psycopg 3 (``pip install "psycopg[binary]"``), or pg8000 (pure Python) when psycopg
    is not installed; ``paramstyle="format"``, ``blob_type="BYTEA"``, the server's default isolation (READ
    COMMITTED is enough: the compare-and-set decides). The URL is checked now, the server first reached on the
    first call. psycopg takes every libpq URL parameter (``?sslmode=require``...); pg8000 takes none (use
    :class:`SqlSink` with your own ``pg8000.dbapi.connect(...)`` for TLS and other options).

    Raises:
        ConfigurationError: Not a ``postgresql://`` URL, or no driver installed.

    Example:
        >>> sink = postgresql("postgresql://rxhubs:secret@127.0.0.1:5432/events")
        >>> sink.paramstyle, "secret" in repr(sink)
        ('format', False)
    """
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise ConfigurationError("expected a URL postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                                 f" (got {_masked(url)!r})")
    try:
        port = parts.port or 5432
    except ValueError as exc:
        raise ConfigurationError(f"bad port in {_masked(url)!r}") from exc
    chosen = driver or next((d for d in ("psycopg", "pg8000") if importlib.util.find_spec(d) is not None), None)
    if chosen is None:
        raise ConfigurationError('a PostgreSQL table needs a driver: pip install "psycopg[binary]" (or pg8000)')
    if chosen not in ("psycopg", "pg8000"):
        raise ConfigurationError(f"driver must be 'psycopg' or 'pg8000', got {chosen!r}")
    if chosen == "pg8000" and parts.query:
        raise ConfigurationError("pg8000 takes no URL parameters; install psycopg, or pass SqlSink your own "
                                 f"pg8000.dbapi.connect(...) ({_masked(url)!r})")

    def connect() -> Any:
        if chosen == "psycopg":
            import psycopg

            return psycopg.connect(url)
        import pg8000.dbapi  # type: ignore[import-untyped]

        return pg8000.dbapi.connect(
            user=unquote(parts.username or "postgres"), password=unquote(parts.password) if parts.password else None,
            host=parts.hostname, port=port, database=unquote(parts.path.lstrip("/")) or None, timeout=30)

    return SqlSink(connect, table=table, positions_table=positions_table, paramstyle="format", blob_type="BYTEA")


def _masked(url: object) -> str:
    """``url`` with its password replaced by ``***``: for errors."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    credentials, _, location = rest.rpartition("@")
    user = credentials.partition(":")[0]
    return f"{scheme}://{user}:***@{location}" if ":" in credentials else text
