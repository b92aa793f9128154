"""The Delta side of :class:`~rxhubs.tables.DeltaSink`: blocking deltalake calls, run in a worker thread.

One :class:`DeltaLog` holds one ``deltalake.DeltaTable`` object and serialises every use of it with a lock. A
commit reads the partitions' positions (their app transactions) from that object and writes through the *same*
object, so the table's conflict check covers what was read: a commit that landed meanwhile with one of the same
app ids makes ours fail (``CommitFailedError``); we then load the newer commits, filter again and retry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.operators import CommitResult
from rxhubs.spark._arrow import to_arrow
from rxhubs.tables._delta_plan import app_id, kept_batches
from rxhubs.tables._plan import contexts_of, plan, result_of

__all__ = ["MAX_ATTEMPTS", "DeltaLog", "import_deltalake"]

log = logging.getLogger("rxhubs.tables")

#: Conflicts one commit rides out (each one means another writer committed a partition of ours meanwhile).
MAX_ATTEMPTS = 20
RETENTION_KEY = "delta.setTransactionRetentionDuration"
INSTALL = "pip install 'rxhubs[delta]'"


def import_deltalake() -> Any:
    """The ``deltalake`` module, or a ConfigurationError that says how to install it."""
    try:
        import deltalake
    except ImportError as exc:
        raise ConfigurationError(f"the Delta sink needs the deltalake package: {INSTALL}") from exc
    return deltalake


def _now_ms() -> int:
    return int(time.time() * 1000)


class DeltaLog:
    """A Delta table's log as the sink uses it: positions per app id, and commits of rows plus positions."""

    def __init__(
        self,
        uri: str,
        *,
        transform: Callable[[Any], Any] | None,
        storage_options: Mapping[str, str] | None,
        configuration: Mapping[str, str | None] | None,
    ) -> None:
        self.deltalake = import_deltalake()
        self.uri = uri
        self.transform = transform
        self.storage_options = dict(storage_options) if storage_options else None
        self.configuration = dict(configuration) if configuration else None
        self.table: Any = None
        self.lock = threading.Lock()
        self.conflicts = 0  # commits that lost a race and were retried (for tests and logs)
        self._warned = False

    # -- reading ----------------------------------------------------------------------------------------------
    def _load(self) -> Any:
        """The table at its latest version (None: there is no table yet)."""
        from deltalake.exceptions import DeltaError, TableNotFoundError

        if self.table is not None:
            try:
                self.table.update_incremental()
                return self.table
            except DeltaError:
                self.table = None  # e.g. the log was cleaned past our version: open it afresh
        try:
            self.table = self.deltalake.DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        self._check_retention(self.table)
        return self.table

    def _check_retention(self, table: Any) -> None:
        retention = table.metadata().configuration.get(RETENTION_KEY)
        if retention and not self._warned:
            self._warned = True
            log.warning(
                "Delta table %s sets %s=%s: a partition that commits nothing for that long loses its position "
                "and may be written twice; remove the setting (rxhubs never sets it)", self.uri, RETENTION_KEY,
                retention,
            )

    def positions(self, partitions: Sequence[PartitionContext]) -> dict[str, int | None]:
        """Each partition's position in the table (None: none yet), by partition id."""
        with self.lock:
            table = self._load()
            return {
                p.partition_id: table.transaction_version(app_id(p)) if table is not None else None
                for p in partitions
            }

    def close(self) -> None:
        with self.lock:
            self.table = None

    # -- committing -------------------------------------------------------------------------------------------
    def commit(self, batches: Sequence[EventBatch], owned: Callable[[PartitionContext], bool]) -> CommitResult:
        """Write what ``batches`` add after the table's positions, and the new positions, in one Delta commit."""
        from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

        contexts = contexts_of(batches)
        with self.lock:
            for _ in range(MAX_ATTEMPTS):
                table = self._load()
                read = {c: table.transaction_version(app_id(c)) if table is not None else None for c in contexts}
                writes = plan(batches, read, owned)
                moves = [w for w in writes if w.moves]
                if not moves:
                    return result_of(writes, table.version() if table is not None else None)
                rows = self._rows(kept_batches(writes))
                if table is None:
                    self._create(rows)
                    continue  # read the positions of the new table (another writer may have won the race)
                now = _now_ms()
                transactions = [self.deltalake.Transaction(app_id(w.context), w.after, last_updated=now) for w in moves]
                try:
                    self.deltalake.write_deltalake(
                        table, rows, mode="append",
                        commit_properties=self.deltalake.CommitProperties(app_transactions=transactions),
                    )
                except CommitFailedError as exc:
                    self.conflicts += 1
                    log.info("Delta commit to %s conflicted (%s); reloading and filtering again", self.uri, exc)
                    continue
                except SchemaMismatchError as exc:
                    raise SinkError(f"rows do not match the Delta table {self.uri}'s schema: {exc}") from exc
                except (DeltaError, OSError) as exc:
                    raise SinkError(f"Delta commit to {self.uri} failed: {exc}", retriable=True) from exc
                return result_of(writes, table.version())
        raise SinkError(f"Delta commit to {self.uri} conflicted {MAX_ATTEMPTS} times in a row", retriable=True)

    def _rows(self, batches: list[EventBatch]) -> Any:
        rows = to_arrow(batches)
        if self.transform is None:
            return rows
        try:
            return self.transform(rows)
        except Exception as exc:
            raise SinkError(f"the Delta sink's transform failed: {exc!r}") from exc

    def _create(self, rows: Any) -> None:
        """Create the table with the rows' schema (no-op if another writer just did)."""
        from deltalake.exceptions import DeltaError

        schema = rows.schema
        try:
            self.deltalake.DeltaTable.create(
                self.uri, schema, mode="ignore", configuration=self.configuration,
                storage_options=self.storage_options,
            )
        except DeltaError as exc:
            log.info("creating Delta table %s: %s (another writer may have created it)", self.uri, exc)
        if self._load() is None:
            raise SinkError(f"could not create the Delta table {self.uri}", retriable=True)

