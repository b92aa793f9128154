"""A partition-id refresh that the service does not answer never holds up the renewals of what is owned.

The balancing loop re-reads the hub's partition ids every round (a management call). When the service is
busy on management only, that call hangs until its deadline (``store_timeout``); the round's claim carries the
renewals, so a round that waited for the refresh renewed late, and with a deadline near the ownership
expiration every partition expired while its reader was healthy (the Azurite outage test, on a loaded machine:
a refresh timed out after 1 s, the renewal went out late, and the partitions were read twice).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from rxhubs.stores import SqliteCheckpointStore
from tests.faults.kit import PARTITIONS, Consumer, live_owners, wait_until

HUB = "busy"
#: Room for a loaded machine: a renewal may come up to 6 s after the last (1 s interval).
EXPIRY = 6.0


@pytest.mark.slow
def test_a_refresh_of_the_partition_ids_that_hangs_does_not_hold_up_the_renewals(
    tmp_path: Path, emulator_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    emulator = emulator_factory(hubs={HUB: PARTITIONS})
    conn = emulator.connection_string(HUB)
    path = tmp_path / "cp.sqlite"

    def store() -> SqliteCheckpointStore:
        return SqliteCheckpointStore(path)

    caplog.set_level(logging.WARNING, "rxhubs.balancing")
    # each store call may take longer than the expiration: a round that waited for the refresh renewed too late
    consumer = Consumer("c", conn, store, ownership_expiration=EXPIRY, store_timeout=EXPIRY + 1.0).start_and_wait()
    busy_for = EXPIRY + 4.0
    try:
        assert wait_until(lambda: sorted(live_owners(conn, store, EXPIRY).values()) == ["c"] * PARTITIONS, 30)
        busy_at = time.time()
        emulator.faults.server_busy(busy_for, on="management", hub=HUB)
        time.sleep(busy_for + 1.0)
        owners_after = live_owners(conn, store, EXPIRY)
        closed = list(consumer.closed)  # (the stop closes them all, as SHUTDOWN)
    finally:
        consumer.stop()
    assert consumer.outcome is None, consumer.outcome
    # the fault was felt: the refreshes failed while the window lasted
    refused = [r.created for r in caplog.records if "reading the partition ids failed" in r.getMessage()]
    assert any(busy_at <= t <= busy_at + busy_for + EXPIRY + 1.0 for t in refused), (busy_at, refused)
    # and the partitions were renewed meanwhile: none expired, none was given up, all are still owned
    expired = [r.getMessage() for r in caplog.records if "expired (no renewal" in r.getMessage()]
    assert expired == []
    assert closed == []
    assert sorted(owners_after.values()) == ["c"] * PARTITIONS, owners_after
