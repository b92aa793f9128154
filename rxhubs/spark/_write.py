"""Writes: ``df.write.format("eventhubs")`` and ``df.writeStream.format("eventhubs")``, through ``EventHub.publish``.

Columns (others are ignored):

- ``body`` (binary or string, required; a string is sent as UTF-8);
- ``partitionId`` (or the connector's ``partition``; string or integer): send the row to that partition; or
  ``partitionKey`` (string): let the service hash it to a partition; never both columns; a null in either, or
  neither column, leaves the partition to the service (round robin);
- ``properties`` (``map<string,string>``): the event's application properties.

Options: the connection's (see :mod:`rxhubs.spark._connection`: ``connectionString``, or
``fullyQualifiedNamespace`` + ``eventHubName`` + a credential). Each task groups its rows by target partition
(or key), keeps their order within each group, and sends each group through the same transport as
``hops.publish`` (:meth:`rxhubs.EventHub.publish`: as few service batches as fit the hub's maximum message
size, retriable failures retried, resending only what was not acknowledged). A row that cannot be sent (a
null body, an event over the size limit, an unknown partition) fails the task with an error naming the row's
position in the task and the reason. Delivery is **at least once**: Spark retries a failed task from its
first row, and rows sent before the failure are sent again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from rxhubs.errors import ConfigurationError, PublishError, RxHubsError
from rxhubs.spark._connection import CONNECTION_KEYS, Connection, close_hub, close_loop
from rxhubs.spark._write_rows import Groups, Target
from rxhubs.spark._write_rows import groups as rows_by_target
from rxhubs.transport._producer import OversizedEventError
from rxhubs.transport._publisher import EventColumns

__all__ = ["EventHubsCommitMessage", "EventHubsStreamWriter", "EventHubsWriter", "check_write_schema"]

_log = logging.getLogger("rxhubs.spark.write")
_KNOWN = CONNECTION_KEYS | {"path", "checkpointlocation", "eventhubs.connectionstring"}
#: Groups sent at once by one task (different partitions or keys, on one connection).
_CONCURRENCY = 8


def check_write_schema(schema: Any) -> tuple[str, str | None, str | None, bool]:
    """The columns to use: body, partition id (or None), partition key (or None), has properties.

    Raises:
        ConfigurationError: No ``body``, a column of the wrong type, or both partition columns.
    """
    from pyspark.sql import types as t

    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise ConfigurationError(f"writing to Event Hubs needs a body column (binary or string); got {sorted(fields)}")
    if not isinstance(fields["body"], t.BinaryType | t.StringType):
        raise ConfigurationError(f"column body must be binary or string, not {fields['body'].simpleString()}")
    pid = next((c for c in ("partitionId", "partition") if c in fields), None)
    key = "partitionKey" if "partitionKey" in fields else None
    if pid is not None and key is not None:
        raise ConfigurationError(
            f"give a {pid} or a partitionKey column, not both (a DataFrame read from a hub has both: select "
            "the columns to write)"
        )
    if pid is not None and not isinstance(fields[pid], t.StringType | t.IntegerType | t.LongType | t.ShortType):
        raise ConfigurationError(f"column {pid} must be a string or an integer, not {fields[pid].simpleString()}")
    if key is not None and not isinstance(fields[key], t.StringType):
        raise ConfigurationError(f"column partitionKey must be a string, not {fields[key].simpleString()}")
    props = fields.get("properties")
    if props is not None and not (isinstance(props, t.MapType) and isinstance(props.keyType, t.StringType)
                                  and isinstance(props.valueType, t.StringType)):
        raise ConfigurationError(f"column properties must be map<string,string>, not {props.simpleString()}")
    return "body", pid, key, props is not None


@dataclass(frozen=True)
class EventHubsCommitMessage(WriterCommitMessage):
    """What one write task reports: its Spark partition and the events it sent."""

    task: int
    events: int


class _Sender:
    """The task side of both writers: options checked on the driver, rows grouped and published on executors."""

    def __init__(self, options: Mapping[str, str], schema: Any, overwrite: bool) -> None:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if overwrite:
            raise ConfigurationError("an event hub cannot be overwritten, only appended to: use mode('append')")
        if "eventhubs.connectionstring" in opts:
            opts.setdefault("connectionstring", opts.pop("eventhubs.connectionstring"))
        unknown = sorted(k for k in set(opts) - _KNOWN if not k.startswith("credentialfactory."))
        if unknown:
            raise ConfigurationError(
                f"unknown eventhubs write option(s) {', '.join(map(repr, unknown))}; known: connectionString, "
                "eventHubName, fullyQualifiedNamespace, credential, credentialFactory and their companions"
            )
        self._connection = Connection(opts)
        self._columns = check_write_schema(schema)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._connection.namespace!r}, {self._connection.eventhub_name!r})"

    def write(self, iterator: Iterator[Any]) -> EventHubsCommitMessage:
        """Send every row of this task; the message counts them. Raises on the first row that cannot be sent."""
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        loop = asyncio.new_event_loop()
        hub = self._connection.hub()
        sent = 0
        try:
            row = 0
            for batch in iterator:
                groups = rows_by_target(batch, self._columns, row, task)
                loop.run_until_complete(self._send(hub, groups, task))
                sent += batch.num_rows
                row += batch.num_rows
        except Exception as exc:
            self._connection.check_secret(exc)
            raise
        finally:
            try:
                loop.run_until_complete(close_hub(hub))
            finally:
                close_loop(loop)
        return EventHubsCommitMessage(task, sent)

    async def _send(self, hub: Any, groups: Groups, task: int) -> None:
        gate = asyncio.Semaphore(_CONCURRENCY)

        async def one(target: Target, group: tuple[Any, EventColumns]) -> None:
            rows, events = group
            async with gate:
                try:
                    # EventHub.publish without its partition check (a management call per task, 0.4 s through
                    # the SDK): the send's own attach names a partition the hub does not have (NotFoundError)
                    await hub._send(events.copy(), target[0], target[1])  # (it drops what was acknowledged)
                except OversizedEventError as exc:
                    row = int(rows[next(i for i, b in enumerate(events.bodies) if b is exc.event.body)])
                    raise ConfigurationError(
                        f"row {row} of write task {task}: {exc} (rows before it in the task may have been sent)"
                    ) from None
                except RxHubsError as exc:
                    where = f"partition {target[0]!r}" if target[0] is not None else f"key {target[1]!r}"
                    raise PublishError(
                        f"rows from {int(rows[0])} of write task {task} ({where}): {exc}",
                        partition_id=target[0] or "", target=self._connection.eventhub_name, retriable=exc.retriable,
                    ) from exc

        results = await asyncio.gather(*(one(t, rows) for t, rows in groups.items()), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # every group has ended: nothing is left running on a loop about to close
            raise failed[0]



def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.events for m in messages if isinstance(m, EventHubsCommitMessage))


class EventHubsWriter(_Sender, DataSourceArrowWriter):
    """``df.write.format("eventhubs")``: each task sends its rows; see the module documentation.

    Example:
        >>> (df.select("body", "partitionKey").write.format("eventhubs")  # doctest: +SKIP
        ...    .option("connectionString", conn_str).mode("append").save())
    """

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the tasks sent (the events are already in the hub)."""
        total = _total(messages)
        _log.info("wrote %d events to %r in %d tasks", total, self._connection.eventhub_name, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the finished tasks sent before the job failed: those events stay in the hub."""
        total = _total(messages)
        _log.warning("write to %r failed; %d events of finished tasks were sent and stay in the hub",
                     self._connection.eventhub_name, total)


class EventHubsStreamWriter(_Sender, DataSourceStreamArrowWriter):
    """``df.writeStream.format("eventhubs")``: each micro-batch's tasks send their rows; at least once.

    A micro-batch that Spark runs again after a failure or a restart (its offsets were logged, its commit
    was not) sends its rows again. :meth:`commit` records each batch id's total once: committing the same
    batch id again replaces its record, it does not add to it.

    Example:
        >>> query = (df.select("body").writeStream.format("eventhubs")  # doctest: +SKIP
        ...     .option("connectionString", conn_str).option("checkpointLocation", "chk/").start())
    """

    def __init__(self, options: Mapping[str, str], schema: Any, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        #: Events sent per committed batch id (in this writer's process).
        self.committed: dict[int, int] = {}

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's
        """Record and log the events the batch's tasks sent (they are already in the hub)."""
        self.committed[batchId] = _total(messages)
        _log.info("micro-batch %d: %d events written to %r", batchId, self.committed[batchId],
                  self._connection.eventhub_name)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's
        """Log what the batch's finished tasks sent: those events stay in the hub, and a rerun sends them again."""
        _log.warning("micro-batch %d to %r failed; %d events of finished tasks were sent and stay in the hub",
                     batchId, self._connection.eventhub_name, _total(messages))
