"""to_arrow gives the table an obvious row-by-row conversion gives, for every kind of event and property value.

The reference below builds each row as a dict and hands the rows to pyarrow at once; its property text follows
the documented rules with ``json.dumps`` for every number. to_arrow works column by column with fast paths
(ints, mappings met again, events received on the direct path), so this is where a fast path that changes
a value shows.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from azure.eventhub import EventData
from azure.eventhub._pyamqp.message import Message, Properties
from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs import Event, EventBatch, PartitionContext
from rxhubs.spark import arrow_schema, property_to_str, to_arrow
from rxhubs.transport._convert import received_events
from rxhubs.transport._convert_messages import ReceivedAnnotations, ReceivedMessage, received_messages

CTX = PartitionContext("ns.servicebus.windows.net", "Telemetry", "$Default", "2")
UTC = dt.UTC


class Level(enum.IntEnum):
    HIGH = 3


def reference_text(value: Any) -> str | None:
    """The documented rules, the slow way: numbers and containers through json.dumps."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return property_to_str(value)  # containers: one rule set, tested in test_dataframe.py
    return str(value)


def reference_map(mapping: Mapping[Any, Any] | None) -> list[tuple[str, str | None]]:
    items = []
    for key, value in (mapping or {}).items():
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        items.append((name, reference_text(value)))
    return items


def reference_table(batches: list[EventBatch]) -> Any:
    rows = []
    for batch in batches:
        for e in batch.events:
            system = e.system_properties or {}
            moment = e.enqueued_time if e.enqueued_time.tzinfo else e.enqueued_time.replace(tzinfo=UTC)
            rows.append({
                "body": bytes(e.body), "partition": batch.context.partition_id, "offset": e.offset,
                "sequenceNumber": e.sequence_number, "enqueuedTime": moment.astimezone(UTC),
                "publisher": reference_text(system.get("x-opt-publisher")), "partitionKey": e.partition_key,
                "properties": reference_map(e.properties), "systemProperties": reference_map(system),
                "consumerGroup": batch.context.consumer_group, "eventHubName": batch.context.eventhub_name,
            })
    return pa.Table.from_pylist(rows, schema=arrow_schema())


VALUES: list[Any] = [
    "text", "ünïcødé ✓", "", None, 0, -1, 2**63 + 5, -(2**70), True, False, 2.5, -0.0, math.inf, math.nan, 1e300,
    Level.HIGH, b"\x00\xff", bytearray(b"ab"), dt.datetime(2026, 3, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.datetime(2026, 3, 1, 14, 0), dt.date(2026, 3, 1), uuid.UUID(int=7), decimal.Decimal("1.10"),
    [1, "a", None], {"k": {"n": 1}}, (1, 2),
]


def assert_same(batches: list[EventBatch]) -> None:
    expected, actual = reference_table(batches), to_arrow(batches)
    assert actual.schema.equals(expected.schema)
    assert actual.to_pylist() == expected.to_pylist()  # NaN and infinities are text in the maps, so == holds
    assert actual.equals(expected)


def test_property_text_of_ints_is_what_json_gives() -> None:
    for value in (0, 7, -12, 2**63, -(2**80), Level.HIGH, True, False):
        assert property_to_str(value) == json.dumps(value), value


def test_every_kind_of_property_value_and_event_field() -> None:
    moment = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    props = {f"p{i}": v for i, v in enumerate(VALUES)}
    shared = {"kind": "reading", "n": 3}
    events = (
        Event(b"\x00\x01", 10, "1000", moment, "key-ü", props, {"x-opt-publisher": "pub", "x-opt-lag": 7}),
        Event(b"", 11, "1100", moment.astimezone(dt.timezone(dt.timedelta(hours=-5))), None, shared),
        Event("ünïcode".encode(), 12, "1200", dt.datetime(2026, 3, 1, 12, 30), None, {}, {}),  # naive: UTC
        Event(b"x", 13, "1300", moment, None, {b"bytes-key": b"\xff", 5: None}, {"x-opt-publisher": None}),
        Event(b"y", 14, "1400", moment, "k", shared),  # the shared mapping again, after others
        Event(b"z", 15, "1500", moment, "k", {"kind": "reading", "n": 3}),  # equal, but another object
    )
    assert_same([EventBatch(CTX, events[:3]), EventBatch(CTX, ()), EventBatch(CTX, events[3:])])


def _messages() -> list[Message]:
    def annotations(n: int) -> dict[bytes, Any]:
        return {b"x-opt-sequence-number": n, b"x-opt-offset": str(n * 8).encode(),
                b"x-opt-enqueued-time": 1767225600000 + n, b"x-opt-partition-key": b"dev-\xc3\xbc"}

    return [
        Message(data=[b"plain"], message_annotations=annotations(1)),
        Message(data=[b"no key"], message_annotations={b"x-opt-sequence-number": 2, b"x-opt-offset": b"16",
                                                        b"x-opt-enqueued-time": 1767225600002}),
        Message(data=[b"app"], message_annotations=annotations(3),
                application_properties={b"kind": b"reading", b"n": 4, b"ok": True, b"raw": b"\xff\xfe"}),
        Message(data=[b"two ", b"sections"], message_annotations=annotations(4)),
        Message(data=[b"props"], message_annotations=annotations(5),
                properties=Properties(message_id=b"m-5", content_type=b"application/json")),
        Message(data=[b"publisher"], message_annotations={**annotations(6), b"x-opt-publisher": b"pub-6"}),
    ]


def test_events_received_on_the_direct_path_convert_as_plain_events() -> None:
    received = received_messages(_messages())
    kinds = [type(e) for e in received]
    assert kinds == [ReceivedAnnotations, ReceivedAnnotations, ReceivedMessage, ReceivedMessage, ReceivedMessage,
                     ReceivedAnnotations]
    assert_same([EventBatch(CTX, tuple(received))])
    # and the same table as from the fully decoded, plain events
    plain = tuple(Event(*e._fields()) for e in received_messages(_messages()))
    assert to_arrow([EventBatch(CTX, tuple(received_messages(_messages())))]).equals(
        to_arrow([EventBatch(CTX, plain)]))


def test_events_received_through_the_sdk_convert_as_plain_events() -> None:
    received = received_events([EventData._from_message(m) for m in _messages()])
    assert_same([EventBatch(CTX, tuple(received))])


values = st.sampled_from(VALUES) | st.integers() | st.text(max_size=5) | st.none()
mappings = st.dictionaries(st.text(max_size=4), values, max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=8), st.one_of(st.none(), st.text(max_size=4)), mappings, mappings,
                          st.booleans()), max_size=12), st.integers(1, 4))
def test_any_events_convert_as_the_reference(specs: list[Any], split: int) -> None:
    moment = dt.datetime(2026, 1, 1, tzinfo=UTC)
    shared: dict[str, Any] = {"shared": 1}
    events = [
        Event(body, n, str(n), moment + dt.timedelta(microseconds=n), key, shared if reuse else props, system)
        for n, (body, key, props, system, reuse) in enumerate(specs)
    ]
    assert_same([EventBatch(CTX, tuple(events[i:i + split])) for i in range(0, len(events), split)])
