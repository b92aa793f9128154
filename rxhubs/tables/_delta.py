"""``DeltaSink``: exactly once into a Delta Lake table through the ``deltalake`` package (no JVM)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError
from rxhubs.operators._transactional import CommitResult
from rxhubs.tables._delta_log import DeltaLog
from rxhubs.tables._delta_plan import app_id

__all__ = ["DeltaSink"]


class DeltaSink:
    """A Delta Lake table that keeps each partition's position in the same commit as its rows.

    A :class:`~rxhubs.operators.TransactionalSink` for ``hops.exactly_once``: every commit appends the rows of
    all the partitions it carries and, in the **same Delta commit**, one app transaction (``txn`` action) per
    partition: app id ``rxhubs/{namespace}/{hub}/{consumer group}/{partition}`` (lower case), version = the
    sequence number of the partition's last event, ``lastUpdated`` = now. Before writing, events at or below a
    partition's version are dropped (a re-delivered batch 90..120 against 100 writes 101..120). The positions
    are read from and written through the same ``DeltaTable`` object, so Delta's conflict check fences them: if
    another writer (a former owner that woke up) committed one of the same partitions meanwhile, the commit
    fails, and the sink loads the new commits, filters again and retries; a partition for which ``owned(ctx)``
    is False by then is dropped, never written.

    Rows have the Spark connector's schema (:data:`rxhubs.spark.SCHEMA`: ``body``, ``partition``, ``offset``,
    ``sequenceNumber``, ``enqueuedTime``, ``publisher``, ``partitionKey``, ``properties``,
    ``systemProperties``, ``consumerGroup``, ``eventHubName``), passed through ``transform`` if given. The
    table is created on the first commit with the schema of those rows.

    Retention: the positions live in the Delta log as long as the table does (Delta keeps every app transaction
    in its checkpoints, so log cleanup keeps them). rxhubs never sets ``delta.setTransactionRetentionDuration``;
    if the table has it, a partition idle for longer than that loses its position (a WARNING is logged) and
    could be written twice. Every transaction carries ``lastUpdated``, so a retention set later expires by age
    only, never at once. Do not reuse a table for a different hub, consumer group or transform of the same one.

    All deltalake calls run in a worker thread, one at a time per sink, so the event loop never blocks.

    Args:
        uri: The table: a local path, or a URI deltalake knows (``abfss://``, ``s3://``, ``gs://``, ...).
        transform: ``transform(pyarrow.Table) -> pyarrow.Table`` (or any Arrow stream) applied to the rows of
            each commit before they are written: add, derive or drop columns. It must keep its output schema.
        storage_options: deltalake's storage options (credentials for object stores).
        configuration: Delta table properties set when the sink creates the table (e.g.
            ``{"delta.checkpointInterval": "10"}``); ignored for an existing table.

    Raises:
        ConfigurationError: deltalake is not installed (``pip install 'rxhubs[delta]'``), or a bad argument.

    Example:
        >>> import asyncio, tempfile
        >>> from rxhubs import EventBatch, PartitionContext
        >>> from rxhubs.testing import InMemoryEventHub
        >>> hub = InMemoryEventHub(partition_count=1)
        >>> events = hub.send([b"a", b"b"], partition_id="0")
        >>> batch = EventBatch(PartitionContext("ns", "telemetry", "$Default", "0"), tuple(events))
        >>> sink = DeltaSink(tempfile.mkdtemp())
        >>> result = asyncio.run(sink.commit([batch], owned=lambda ctx: True))
        >>> result.written, result.positions
        ({'0': 2}, {'0': 1})
        >>> asyncio.run(sink.commit([batch], owned=lambda ctx: True)).skipped  # again: already in the table
        {'0': 2}
    """

    def __init__(
        self,
        uri: str | Path,
        *,
        transform: Callable[[Any], Any] | None = None,
        storage_options: Mapping[str, str] | None = None,
        configuration: Mapping[str, str | None] | None = None,
    ) -> None:
        if not isinstance(uri, str | Path) or not str(uri):
            raise ConfigurationError(f"uri must be a non-empty path or URI, got {uri!r}")
        if transform is not None and not callable(transform):
            raise ConfigurationError(f"transform must be callable, got {type(transform).__name__}")
        self._log = DeltaLog(
            str(uri), transform=transform, storage_options=storage_options, configuration=configuration
        )

    @property
    def uri(self) -> str:
        """The table's path or URI."""
        return self._log.uri

    @staticmethod
    def app_id(context: PartitionContext) -> str:
        """The app id that holds ``context``'s position in the table's log.

        Example:
            >>> DeltaSink.app_id(PartitionContext("ns", "telemetry", "$Default", "0"))
            'rxhubs/ns/telemetry/$default/0'
        """
        return app_id(context)

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        """The sequence number of each partition's last event in the table, by partition id (None: none yet).

        Example:
            >>> asyncio.run(sink.positions([PartitionContext("ns", "telemetry", "$Default", "0")]))  # doctest: +SKIP
            {'0': 1}
        """
        return await asyncio.to_thread(self._log.positions, list(partitions))

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> CommitResult:
        """One Delta commit: rows after each partition's position, and the new positions (see the class).

        Raises:
            SinkError: The write failed (retriable: I/O; not: the rows do not fit the table's schema, or
                ``transform`` raised), or it conflicted with other writers 20 times in a row (retriable).

        Example:
            >>> asyncio.run(sink.commit(batches, owned=lambda ctx: True)).written  # doctest: +SKIP
            {'0': 120, '1': 98}
        """
        return await asyncio.to_thread(self._log.commit, list(batches), owned)

    async def close(self) -> None:
        """Let go of the table (after a call in progress); the sink opens it again if used later. Idempotent."""
        await asyncio.to_thread(self._log.close)

    def __repr__(self) -> str:
        return f"DeltaSink({self.uri!r})"
