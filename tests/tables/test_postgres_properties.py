"""The property of tests/tables/test_sql_properties.py on a real PostgreSQL server, through both drivers.

Its faults are real: the server ends the writer's backend before the rows or before COMMIT, and a proxy drops
COMMIT's answer after it landed. Fewer examples than on SQLite: each one opens real connections.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rxhubs.tables import SqlSink
from tests.support.postgres import Postgres
from tests.tables.pgkit import DRIVERS, Faults, KilledConnection, ProxyThread, connector, pg_sink
from tests.tables.properties import check, step


class PostgresTable:
    """One database, emptied for each example; writers connect through the proxy (for ``commit_lost``)."""

    def __init__(self, server: Postgres, proxy: ProxyThread, driver: str) -> None:
        self.server, self.proxy, self.driver = server, proxy, driver
        self.database = server.database()
        self.db = server.admin(self.database)  # reads the table back after every step: one connection

    def fresh(self) -> PostgresTable:
        self.db.run("DROP TABLE IF EXISTS rxhubs_events, rxhubs_positions")
        return self

    def writer(self) -> tuple[Faults, SqlSink]:
        faults = Faults(self.server, self.proxy.proxy)
        connect = connector(self.driver, self.proxy.proxy.host, self.proxy.proxy.port, self.database)
        return faults, pg_sink(lambda: KilledConnection(connect, faults))

    def numbers(self) -> list[int]:
        return [int(n) for (n,) in self.db.run('SELECT "sequenceNumber" FROM rxhubs_events ORDER BY 1')]

    def position(self) -> int | None:
        rows = self.db.run("SELECT sequence_number FROM rxhubs_positions")
        return None if not rows else int(rows[0][0])


@pytest.fixture(scope="module", params=DRIVERS)
def table(request: pytest.FixtureRequest, postgres: Postgres) -> Iterator[PostgresTable]:
    proxy = ProxyThread(postgres)
    try:
        table = PostgresTable(postgres, proxy, str(request.param))
        try:
            yield table
        finally:
            table.db.close()
    finally:
        proxy.close()


#: Always run, whatever the search finds: the other writer commits inside each commit, and each fault fires.
RACES_AND_FAULTS = [
    ("deliver", "a", 1, None, False), ("deliver", "a", 1, None, True), ("deliver", "b", 4, "before_write", True),
    ("deliver", "a", 5, "before_commit", True), ("resume", "b", 6, None, False),
    ("deliver", "b", 9, "commit_lost", False), ("lose", "a", 0, None, False), ("deliver", "a", 3, None, True),
    ("resume", "a", 12, None, False), ("deliver", "a", 20, "commit_lost", True),
]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=25))
@example(steps=RACES_AND_FAULTS)
def test_the_table_is_exactly_what_was_delivered_whatever_fails(table: PostgresTable,
                                                                steps: list[tuple[Any, ...]]) -> None:
    check(steps, table.fresh())
