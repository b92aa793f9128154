"""SqlSink on a real PostgreSQL server through the unmodified drivers users use (pg8000, psycopg 3).

Faults are real: the server ends the backend mid-transaction (``pg_terminate_backend``), or a proxy drops
COMMIT's answer after it landed; concurrent writers are real connections in their own threads.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.tables import postgresql, sink_for
from tests.support.postgres import Postgres
from tests.tables.kit import CTX, STEPS, T0, events
from tests.tables.pgkit import DRIVERS, Faults, KilledConnection, ProxyThread, connector, numbers, pg_sink, position


def mine(_: object) -> bool:
    return True


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(driver: str, postgres: Postgres, pg_database: str) -> Callable[[], Any]:
    return connector(driver, postgres.host, postgres.port, pg_database)


@pytest.fixture
def proxy(postgres: Postgres) -> Iterator[ProxyThread]:
    thread = ProxyThread(postgres)
    try:
        yield thread
    finally:
        thread.close()


def _driver_error(exc: BaseException | None, driver: str) -> bool:
    """An error of the driver's own (pg8000 lets a reset socket's ConnectionResetError through as is)."""
    return exc is not None and (type(exc).__module__.startswith(driver) or isinstance(exc, ConnectionError))


def test_straddling_redelivery_bytea_bigint_and_positions(connect: Callable[[], Any], postgres: Postgres,
                                                          pg_database: str) -> None:
    sink = pg_sink(connect)
    asyncio.run(sink.commit([events(0, 100)], owned=mine))
    result = asyncio.run(sink.commit([events(90, 120)], owned=mine))
    assert (result.written, result.skipped, result.positions) == ({"0": 20}, {"0": 11}, {"0": 120})
    big = 5_000_000_000  # beyond 32 bits: sequence numbers are BIGINT
    asyncio.run(sink.commit([events(big, big + 2, "1")], owned=mine))
    again = asyncio.run(sink.commit([events(0, 120), events(big, big + 2, "1")], owned=mine))
    assert again.written == {"0": 0, "1": 0} and again.skipped == {"0": 121, "1": 3}
    assert asyncio.run(sink.positions([CTX["0"], CTX["1"], CTX["2"]])) == {"0": 120, "1": big + 2, "2": None}
    asyncio.run(sink.close())
    assert numbers(postgres, pg_database) == list(range(121))
    assert numbers(postgres, pg_database, "1") == [big, big + 1, big + 2]
    with postgres.admin(pg_database) as db:
        [[body, enqueued]] = db.run('SELECT body, "enqueuedTime" FROM rxhubs_events WHERE "sequenceNumber" = 7')
        types = dict(db.run("SELECT table_name || '.' || column_name, data_type FROM information_schema.columns"
                            " WHERE column_name IN ('body', 'sequenceNumber', 'sequence_number')"))
    assert (body, enqueued) == (b"e7", "2026-01-01T00:00:00+00:00")
    assert types == {"rxhubs_events.body": "bytea", "rxhubs_events.sequenceNumber": "bigint",
                     "rxhubs_positions.sequence_number": "bigint"}


def test_tables_of_your_own_with_native_types(connect: Callable[[], Any], postgres: Postgres,
                                              pg_database: str) -> None:
    """create=False into TIMESTAMPTZ and JSONB columns: the text the sink sends is cast by the server."""
    with postgres.admin(pg_database) as db:
        db.run('CREATE TABLE ev (body BYTEA, partition TEXT, "offset" TEXT, "sequenceNumber" BIGINT,'
               ' "enqueuedTime" TIMESTAMPTZ, publisher TEXT, "partitionKey" TEXT, properties JSONB,'
               ' "systemProperties" JSONB, "consumerGroup" TEXT, "eventHubName" TEXT,'
               ' PRIMARY KEY (partition, "sequenceNumber"))')
        db.run("CREATE TABLE pos (namespace TEXT, eventhub TEXT, consumer_group TEXT, partition_id TEXT,"
               " sequence_number BIGINT NOT NULL, updated_at TIMESTAMPTZ NOT NULL,"
               " PRIMARY KEY (namespace, eventhub, consumer_group, partition_id))")
    sink = pg_sink(connect, table="ev", positions_table="pos", create=False)
    asyncio.run(sink.commit([events(0, 4)], owned=mine))
    asyncio.run(sink.commit([events(3, 9)], owned=mine))
    asyncio.run(sink.close())
    assert numbers(postgres, pg_database, table="ev") == list(range(10))
    with postgres.admin(pg_database) as db:
        [[enqueued]] = db.run('SELECT "enqueuedTime" FROM ev WHERE "sequenceNumber" = 3')
        [[moved, updated]] = db.run("SELECT sequence_number, updated_at FROM pos")
    assert enqueued == T0 and moved == 9
    assert abs(updated - dt.datetime.now(dt.UTC)) < dt.timedelta(hours=1)


@pytest.mark.parametrize("step", STEPS)
def test_a_real_fault_at_each_step_then_a_retry_leaves_every_event_once(
        driver: str, connect: Callable[[], Any], postgres: Postgres, pg_database: str, proxy: ProxyThread,
        step: str) -> None:
    through = connector(driver, proxy.proxy.host, proxy.proxy.port, pg_database)
    faults = Faults(postgres, proxy.proxy)
    sink = pg_sink(lambda: KilledConnection(through, faults))
    asyncio.run(sink.commit([events(0, 9)], owned=mine))
    faults.armed.add(step)
    cuts = proxy.proxy.stats.connections_cut
    with pytest.raises(SinkError) as failed:
        asyncio.run(sink.commit([events(5, 19)], owned=mine))
    assert faults.felt == [step] and failed.value.retriable
    assert _driver_error(failed.value.__cause__, driver), repr(failed.value.__cause__)  # the driver felt it
    assert proxy.proxy.stats.connections_cut == cuts + (step == "commit_lost")
    landed = numbers(postgres, pg_database)
    assert landed == (list(range(20)) if step == "commit_lost" else list(range(10)))  # all or nothing
    retry = asyncio.run(sink.commit([events(5, 19)], owned=mine))  # the operator retries the same batches
    assert retry.written == {"0": 0 if step == "commit_lost" else 10}
    assert numbers(postgres, pg_database) == list(range(20)) and position(postgres, pg_database) == 19
    assert len(faults.pids) == 2 and faults.pids[0] != faults.pids[1]  # the broken connection was replaced
    asyncio.run(sink.close())


def test_a_connection_ended_while_idle_is_replaced(driver: str, postgres: Postgres, pg_database: str) -> None:
    faults = Faults(postgres)
    sink = pg_sink(lambda: KilledConnection(connector(driver, postgres.host, postgres.port, pg_database), faults))
    asyncio.run(sink.commit([events(0, 4)], owned=mine))
    assert postgres.terminate(faults.pids[0])
    with pytest.raises(SinkError) as failed:
        asyncio.run(sink.commit([events(5, 9)], owned=mine))
    assert failed.value.retriable and _driver_error(failed.value.__cause__, driver)
    assert asyncio.run(sink.commit([events(5, 9)], owned=mine)).written == {"0": 5}
    assert len(faults.pids) == 2 and numbers(postgres, pg_database) == list(range(10))
    asyncio.run(sink.close())


def test_an_autocommit_connection_is_made_transactional(driver: str, postgres: Postgres, pg_database: str) -> None:
    """A driver in autocommit would land the rows without the position: the sink turns it off."""
    faults = Faults(postgres)
    connect = connector(driver, postgres.host, postgres.port, pg_database, autocommit=True)
    sink = pg_sink(lambda: KilledConnection(connect, faults))
    asyncio.run(sink.commit([events(0, 4)], owned=mine))
    faults.armed.add("before_commit")
    with pytest.raises(SinkError):
        asyncio.run(sink.commit([events(5, 9)], owned=mine))
    assert faults.felt == ["before_commit"] and numbers(postgres, pg_database) == list(range(5))
    asyncio.run(sink.close())


ISOLATION = ("READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")


@pytest.mark.parametrize("isolation", ISOLATION)
@pytest.mark.parametrize("first", [True, False], ids=["first-position", "moving"])
def test_two_writers_commit_the_same_partition_at_once(driver: str, postgres: Postgres, pg_database: str,
                                                       isolation: str, first: bool) -> None:
    """Both read the same position before either writes (a barrier); exactly one wins, the other filters again."""
    setup = f"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {isolation}"
    connect = connector(driver, postgres.host, postgres.port, pg_database, setup=setup)
    barrier = threading.Barrier(2, timeout=30)
    writers = [Faults(postgres) for _ in range(2)]
    sinks = [pg_sink(lambda f=f: KilledConnection(connect, f)) for f in writers]
    if not first:
        asyncio.run(sinks[0].commit([events(0, 9)], owned=mine))
    for writer in writers:
        writer.on_read = barrier.wait
    start = 0 if first else 5  # a re-delivery that straddles the position

    async def both() -> list[Any]:
        return list(await asyncio.gather(*(s.commit([events(start, 29)], owned=mine) for s in sinks)))

    results = asyncio.run(both())
    assert sorted(r.written["0"] for r in results) == [0, 30 if first else 20]
    assert sum(s.conflicts for s in sinks) == 1  # exactly one lost the compare-and-set
    assert numbers(postgres, pg_database) == list(range(30)) and position(postgres, pg_database) == 29
    probe = connect()
    cursor = probe.cursor()
    cursor.execute("SHOW transaction_isolation")
    assert cursor.fetchone()[0] == isolation.lower()  # the level the sinks' connections ran at
    probe.close()
    for s in sinks:
        asyncio.run(s.close())


def test_a_zombie_that_loses_its_partition_writes_nothing(connect: Callable[[], Any], postgres: Postgres,
                                                          pg_database: str) -> None:
    zombie_faults = Faults(postgres)
    zombie, owner = pg_sink(lambda: KilledConnection(connect, zombie_faults)), pg_sink(connect)
    asyncio.run(owner.commit([events(0, 9)], owned=mine))
    asked: list[str] = []

    def owned(_: object) -> bool:
        asked.append("?")
        return len(asked) == 1  # owned at the first read, lost by the retry

    # the zombie read position 9; before it writes, the new owner commits 10..30
    zombie_faults.on_read = lambda: asyncio.run(owner.commit([events(10, 30)], owned=mine))
    result = asyncio.run(zombie.commit([events(10, 40)], owned=owned))
    assert zombie.conflicts == 1 and len(asked) == 2
    assert result.written == {"0": 0} and result.skipped == {"0": 31}
    assert numbers(postgres, pg_database) == list(range(31)) and position(postgres, pg_database) == 30
    for s in (zombie, owner):
        asyncio.run(s.close())


def test_two_sinks_create_the_tables_at_once(driver: str, postgres: Postgres, pg_database: str) -> None:
    barrier = threading.Barrier(2, timeout=30)
    plain = connector(driver, postgres.host, postgres.port, pg_database)

    def connect() -> Any:
        connection = plain()
        barrier.wait()  # both run CREATE TABLE IF NOT EXISTS together
        return connection

    sinks = [pg_sink(connect) for _ in range(2)]

    async def both() -> None:
        await asyncio.gather(*(s.commit([events(0, 3, str(i))], owned=mine) for i, s in enumerate(sinks)))

    asyncio.run(both())
    assert numbers(postgres, pg_database, "0") == numbers(postgres, pg_database, "1") == [0, 1, 2, 3]
    for s in sinks:
        asyncio.run(s.close())



def test_writers_of_two_partitions_in_opposite_orders_do_not_deadlock(
        driver: str, postgres: Postgres, pg_database: str, caplog: pytest.LogCaptureFixture) -> None:
    """Positions are moved in one order (by key), whatever the order of the batches: no lock cycle."""
    connect = connector(driver, postgres.host, postgres.port, pg_database)
    barrier = threading.Barrier(2, timeout=30)
    writers = [Faults(postgres) for _ in range(2)]
    sinks = [pg_sink(lambda f=f: KilledConnection(connect, f)) for f in writers]
    asyncio.run(sinks[0].commit([events(0, 0, "0"), events(0, 0, "1")], owned=mine))
    holding = threading.Barrier(2)

    def both_hold_a_lock() -> None:  # in opposite orders, each would now hold the row the other one needs next
        try:
            holding.wait(timeout=1.0)
        except threading.BrokenBarrierError:  # the other one waits on this one's lock: the one order at work
            pass

    for writer in writers:
        writer.on_read, writer.on_move = barrier.wait, both_hold_a_lock
    orders = (("0", "1"), ("1", "0"))

    async def both() -> None:
        await asyncio.gather(*(s.commit([events(1, 9, p) for p in order], owned=mine)
                               for s, order in zip(sinks, orders, strict=True)))

    with caplog.at_level("INFO", logger="rxhubs.tables"):
        asyncio.run(both())
    assert sum(s.conflicts for s in sinks) == 1
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()]
    assert numbers(postgres, pg_database, "0") == numbers(postgres, pg_database, "1") == list(range(10))
    for s in sinks:
        asyncio.run(s.close())


def test_a_url_names_the_table(driver: str, postgres: Postgres, pg_database: str) -> None:
    """postgresql(url) with either driver, and sink_for's postgresql:// spec (the command line's --sink)."""
    url = f"postgresql://postgres:s%40cret@{postgres.host}:{postgres.port}/{pg_database}"  # trusted: ignored
    sink = postgresql(url, driver=driver)  # type: ignore[arg-type]
    asyncio.run(sink.commit([events(0, 4)], owned=mine))
    asyncio.run(sink.close())
    spec = sink_for(postgres.url(pg_database))
    assert spec is not None and asyncio.run(spec.commit([events(3, 9)], owned=mine)).written == {"0": 5}
    assert asyncio.run(spec.positions([CTX["0"]])) == {"0": 9}
    asyncio.run(spec.close())  # type: ignore[attr-defined]
    assert numbers(postgres, pg_database) == list(range(10))
    missing = postgresql(f"postgresql://postgres:s%40cret@{postgres.host}:{postgres.port}/nope", driver=driver)  # type: ignore[arg-type]
    with pytest.raises(SinkError) as failed:
        asyncio.run(missing.positions([CTX["0"]]))
    assert failed.value.retriable and "nope" in str(failed.value) and "cret" not in str(failed.value)
    asyncio.run(missing.close())


def test_bad_urls_are_refused_without_their_password() -> None:
    for url in ("postgresql:", "postgresql://", "mysql://u@h/db", "postgresql://u:pw@h:99999/db"):
        with pytest.raises(ConfigurationError) as refused:
            postgresql(url)
        assert ":pw@" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="pg8000 takes no URL parameters"):
        postgresql("postgresql://u@h/db?sslmode=require", driver="pg8000")
    with pytest.raises(ConfigurationError):
        postgresql("postgresql://u@h/db", driver="asyncpg")  # type: ignore[arg-type]
