"""The property of tests/tables/test_sql_properties.py on a real PostgreSQL server, through both drivers.

Its faults are real: the server ends the writer's backend before the rows or before COMMIT, and a proxy drops
COMMIT's answer after it landed. Fewer examples than on SQLite: each one opens real connections.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rxhubs.tables import SqlSink
from tests.support.postgres import Postgres
from tests.tables.kit import STEPS
from tests.tables.pgkit import DRIVERS, Faults, KilledConnection, ProxyThread, connector, pg_sink
from tests.tables.properties import RACES_AND_FAULTS, check, step


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


@pytest.mark.slow
def test_the_table_is_exactly_what_was_delivered_whatever_fails(table: PostgresTable) -> None:
    felt: Counter[str] = Counter()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step, min_size=1, max_size=25))
    @example(steps=RACES_AND_FAULTS)
    def run(steps: list[tuple[Any, ...]]) -> None:
        felt.update(check(steps, table.fresh()))

    run()
    assert set(felt) >= {*STEPS, "lost"}, felt  # every fault fired, and a writer that lost the partition committed
