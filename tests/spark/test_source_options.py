"""The streaming source's options: the Scala connector's names where they mean the same, and the discovery shims.

No Spark session here: options are checked when the reader is built, and the shims are plain modules.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rxhubs
from rxhubs import Position
from rxhubs.errors import ConfigurationError
from rxhubs.spark._datasource import EventHubsDataSource, RxHubsDataSource
from rxhubs.spark._source_options import _Options

SECRET = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
FAKE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET};EntityPath=h"
DISCOVERY = Path(__file__).resolve().parents[2] / "rxhubs" / "spark" / "_discovery"


def position(offset: str | None = None, seq: int = -1, inclusive: bool = True, time: str | None = None) -> str:
    """A JSON EventPosition exactly as the connector's PySpark guide builds one."""
    return json.dumps({"offset": offset, "seqNo": seq, "enqueuedTime": time, "isInclusive": inclusive})


def key(partition: int, hub: str = "h") -> str:
    return json.dumps({"ehName": hub, "partitionId": partition})


def starts(options: dict[str, str], partitions: tuple[str, ...] = ("0", "1", "2")) -> dict[str, Any]:
    opts = _Options(options)
    return {p: opts.start_of(p) for p in partitions}


def test_the_scala_connectors_option_names_mean_the_same_here() -> None:
    ehconf = {
        "eventhubs.connectionString": FAKE,
        "eventhubs.consumerGroup": "analytics",
        "eventhubs.prefetchCount": "250",
        "eventhubs.receiverTimeout": "PT1M30S",
        "maxEventsPerTrigger": "5000",
    }
    opts = _Options(ehconf)
    assert (opts.eventhub_name, opts.consumer_group, opts.prefetch, opts.receive_timeout, opts.max_events) == (
        "h", "analytics", 250, 90.0, 5000,
    )
    native = _Options({"connectionString": FAKE, "consumerGroup": "analytics", "prefetch": "250",
                       "receiveTimeout": "90", "maxEventsPerTrigger": "5000"})
    assert vars(native) == vars(opts)
    assert _Options({"EVENTHUBS.CONNECTIONSTRING": FAKE}).connection_string == FAKE  # names are case-insensitive


def test_starting_positions_in_the_connectors_json() -> None:
    assert starts({"connectionString": FAKE, "eventhubs.startingPosition": position(offset="-1")}) == dict.fromkeys(
        "012", "earliest"
    )
    assert starts({"connectionString": FAKE, "eventhubs.startingPosition": position(offset="@latest")}) == (
        dict.fromkeys("012", "latest")
    )
    per_partition = {
        key(0): json.loads(position(offset="@latest")),
        key(2): json.loads(position(seq=100)),
        # a plain partition id works too; a seqNo is taken as it is, whatever isInclusive says (the connector's
        # EventHubsClient.translate: `if (position.seqNo >= 0L) result.put(id, position.seqNo)`)
        "1": json.loads(position(seq=7, inclusive=False)),
    }
    assert starts({"connectionString": FAKE, "eventhubs.startingPositions": json.dumps(per_partition)}) == {
        "0": "latest", "1": 7, "2": 100,
    }
    # per-partition entries win; the others take eventhubs.startingPosition (else the end of the stream)
    assert starts({
        "connectionString": FAKE,
        "eventhubs.startingPosition": position(offset="@latest"),
        "eventhubs.startingPositions": json.dumps({key(1): json.loads(position(seq=3))}),
    }) == {"0": "latest", "1": 3, "2": "latest"}
    # as in the connector, whose default position is the end of the stream
    assert starts({"connectionString": FAKE, "eventhubs.startingPositions": json.dumps({key(1): json.loads(
        position(seq=3))})}) == {"0": "latest", "1": 3, "2": "latest"}


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"eventhubs.startingPosition": position(time="yesterday")}, "ISO 8601"),
        ({"eventhubs.startingPosition": position(offset="x 12")}, "a number, or a geo-replicated string"),
        ({"eventhubs.startingPosition": position(offset="-1", seq=4)}, "not offset and seqNo"),
        ({"eventhubs.startingPosition": position(offset="5", time="2026-01-01T00:00:00Z")}, "not offset and"),
        ({"eventhubs.startingPosition": position(seq=-3)}, "seqNo"),
        ({"eventhubs.startingPosition": "earliest"}, "must be JSON"),
        ({"eventhubs.startingPositions": json.dumps({key(0, "other"): json.loads(position(seq=1))})}, "'other'"),
        ({"eventhubs.startingPositions": json.dumps({json.dumps({"ehName": "h"}): {}})}, "names no partition"),
        ({"eventhubs.startingPositions": "[1, 2]"}, "JSON object"),
        ({"eventhubs.startingPosition": position(offset="-1"), "startingPosition": "earliest"}, "not both"),
        ({"eventhubs.consumerGroup": "a", "consumerGroup": "b"}, "given twice"),
        ({"eventhubs.endingPosition": position(offset="@latest")}, "availableNow"),
        ({"eventhubs.endingPositions": "{}"}, "ends a batch read"),
        ({"eventhubs.receiverTimeout": "PT0S"}, "receiveTimeout"),
        ({"eventhubs.receiverTimeout": "P1D"}, "receiveTimeout"),
        ({"eventhubs.operationTimeout": "PT60S"}, "unknown"),
    ],
)
def test_bad_connector_options_are_configuration_errors_without_the_key(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment) as info:
        EventHubsDataSource({"connectionString": FAKE, **options}).streamReader(None)
    assert SECRET not in str(info.value)


def test_offsets_and_enqueued_times_become_positions_the_driver_translates() -> None:
    per_partition = {
        key(0): json.loads(position(offset="4096")),
        key(1): json.loads(position(time="2026-03-01T12:00:00.1234Z", inclusive=False)),
        key(2): json.loads(position(time="2026-03-01T12:00:00")),  # naive: UTC
    }
    assert starts({"connectionString": FAKE, "eventhubs.startingPositions": json.dumps(per_partition)}) == {
        "0": Position.from_offset("4096", inclusive=True),
        "1": Position.from_enqueued_time(dt.datetime(2026, 3, 1, 12, 0, 0, 123400, tzinfo=dt.UTC)),
        "2": Position.from_enqueued_time(dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC), inclusive=True),
    }


@pytest.mark.slow
def test_the_driver_translates_offsets_and_enqueued_times_on_the_emulator(emulator_factory: Any) -> None:
    conn = emulator_factory(hubs={"h": 3}).connection_string("h")

    async def fill() -> dict[str, list[rxhubs.Event]]:
        async with rxhubs.EventHub.from_connection_string(conn) as hub:
            for p in ("0", "1"):
                await hub.send([f"a{i}" for i in range(5)], partition_id=p)
            await asyncio.sleep(0.05)  # later enqueued times for the second five
            for p in ("0", "1"):
                await hub.send([f"b{i}" for i in range(5)], partition_id=p)
            out = {}
            for p in ("0", "1"):
                async with hub.receiver(p, start=Position.earliest()) as receiver:
                    out[p] = await receiver.receive_batch(10, max_wait=10)
            return out

    events = asyncio.run(fill())
    assert [len(v) for v in events.values()] == [10, 10]
    b0 = events["1"][5]
    assert b0.enqueued_time > events["1"][4].enqueued_time

    def initial(per_partition: dict[str, Any]) -> dict[str, int]:
        reader = EventHubsDataSource(
            {"eventhubs.connectionString": conn, "eventhubs.startingPositions": json.dumps(per_partition)}
        ).streamReader(None)
        try:
            return dict(reader.initialOffset())
        finally:
            reader.stop()

    def at(when: dt.datetime) -> dict[str, Any]:
        return {"offset": None, "seqNo": -1, "enqueuedTime": when.isoformat(), "isInclusive": True}

    assert initial({
        "0": {"offset": str(events["0"][3].offset), "seqNo": -1, "enqueuedTime": None, "isInclusive": True},
        "1": at(b0.enqueued_time),
        "2": at(b0.enqueued_time),  # an empty partition starts at its end
    }) == {"0": 3, "1": 5, "2": 0}
    assert initial({
        "0": {"offset": str(events["0"][3].offset), "seqNo": -1, "enqueuedTime": None, "isInclusive": False},
        "1": at(b0.enqueued_time + dt.timedelta(days=1)),  # after the last event: the partition's end
    }) == {"0": 4, "1": 10, "2": 0}


def test_the_same_value_under_both_names_is_accepted() -> None:
    opts = _Options({"connectionString": FAKE, "eventhubs.connectionString": FAKE})
    assert opts.connection_string == FAKE


def load_shim(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_shim_{name}", DISCOVERY / name / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_discovery_shims_name_the_source_as_spark_expects() -> None:
    eventhubs, rxhubs_ = load_shim("pyspark_rxhubs_eventhubs"), load_shim("pyspark_rxhubs")
    # what pyspark/sql/worker/lookup_data_sources.py checks, and the name it registers
    assert eventhubs.DefaultSource is EventHubsDataSource and eventhubs.DefaultSource.name() == "eventhubs"
    assert rxhubs_.DefaultSource is RxHubsDataSource and rxhubs_.DefaultSource.name() == "rxhubs"
    assert issubclass(RxHubsDataSource, EventHubsDataSource)
