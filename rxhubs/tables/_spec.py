"""Tables named by a spec string, as the command line takes them (``--sink sqlite:PATH``)."""

from __future__ import annotations

from rxhubs.errors import ConfigurationError
from rxhubs.operators import TransactionalSink
from rxhubs.tables._delta import DeltaSink
from rxhubs.tables._postgres import postgresql
from rxhubs.tables._sqlite import SqliteSink

__all__ = ["sink_for"]


def sink_for(spec: str) -> TransactionalSink | None:
    """The table a spec names, or None when ``spec`` names no table (``console``, ``jsonl:PATH``, ...).

    ``sqlite:PATH``: a :class:`~rxhubs.tables.SqliteSink` on the file ``PATH``; ``postgresql://...``: the
    database that URL names (:func:`~rxhubs.tables.postgresql`); ``delta:PATH``: a
    :class:`~rxhubs.tables.DeltaSink` on the Delta table at ``PATH`` (a folder or a URI such as ``abfss://...``).

    Raises:
        ConfigurationError: A table scheme without a path.

    Example:
        >>> import os, tempfile
        >>> sink_for("sqlite:" + os.path.join(tempfile.mkdtemp(), "events.db"))  # doctest: +ELLIPSIS
        SqliteSink('...events.db', table='rxhubs_events')
        >>> sink_for("delta:out/events")
        DeltaSink('out/events')
        >>> sink_for("jsonl:out.jsonl") is None
        True
    """
    scheme, _, target = spec.partition(":")
    if scheme == "sqlite":
        if not target:
            raise ConfigurationError("sqlite: needs a file path, e.g. --sink sqlite:events.db")
        return SqliteSink(target)
    if scheme == "delta":
        if not target:
            raise ConfigurationError("delta: needs a table path, e.g. --sink delta:out/events")
        return DeltaSink(target)
    if scheme in ("postgresql", "postgres"):
        return postgresql(spec)
    return None
