"""to_arrow reads received messages straight from their AMQP sections: the same table as field by field.

Property: for any message pyamqp encodes with the annotations the service sets (and odd ones), decoded by pyamqp
and by the compiled frame reader, ``to_arrow`` of the received events equals a reference table built row by
row from the events' decoded fields with the documented rules (:func:`property_to_str`, UTC instants), and so
does ``to_arrow`` of plain :class:`~rxhubs.Event` copies.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from azure.eventhub import EventData
from azure.eventhub._pyamqp._decode import decode_payload
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.message import Message, Properties
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes
from azure.eventhub._transport._pyamqp_transport import PyamqpTransport
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs import Event, EventBatch, PartitionContext
from rxhubs.spark import arrow_schema, property_to_str, to_arrow
from rxhubs.spark._columns import to_micros
from rxhubs.spark._schema import key_to_str
from rxhubs.transport import _frames_py
from rxhubs.transport._convert_messages import ReceivedAnnotations, ReceivedMessage, received_messages
from rxhubs.transport._frames import compiled_reader, receive_path
from tests.support.native import PURE_ASKED

CTX = PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "2")


def _compiled() -> Any:
    """The compiled build in use (built, and from today's source): the "compiled" case never runs the .py twin."""
    reader = compiled_reader()
    assert reader is not None, f"make test builds the compiled frame reader: {receive_path()}"
    return reader


DECODERS = {
    "pyamqp": lambda raw: decode_payload(memoryview(raw)),
    "python": lambda raw: _frames_py.decode_message(raw, 0, len(raw)),
    "compiled": lambda raw: _compiled().decode_message(raw, 0, len(raw)),
}
if PURE_ASKED:  # RXHUBS_NO_EXTENSIONS=1: the pure build's run holds the Python reader to pyamqp's
    del DECODERS["compiled"]
#: The reader of the build in use (the rows checked field by field below).
IN_USE = "python" if PURE_ASKED else "compiled"


def reference(batches: list[EventBatch]) -> Any:
    """The table row by row from each event's fields, as to_arrow documents it (the rules, not its code)."""
    rows = []
    for batch in batches:
        for e in batch.events:
            system = e.system_properties
            rows.append({
                "body": e.body, "partition": batch.context.partition_id, "offset": e.offset,
                "sequenceNumber": e.sequence_number, "enqueuedTime": e.enqueued_time,
                "publisher": property_to_str(system.get("x-opt-publisher")) if system else None,
                "partitionKey": e.partition_key,
                "properties": [(key_to_str(k), property_to_str(v)) for k, v in e.properties.items()],
                "systemProperties": [(key_to_str(k), property_to_str(v)) for k, v in system.items()],
                "consumerGroup": batch.context.consumer_group, "eventHubName": batch.context.eventhub_name,
            })
    return pa.Table.from_pylist(rows, schema=arrow_schema())


def received(messages: list[Message], decoder: str) -> list[Any]:
    raws = [bytes(encode_payload(bytearray(), m)) for m in messages]
    events = received_messages([DECODERS[decoder](raw) for raw in raws])
    assert all(type(e) in (ReceivedMessage, ReceivedAnnotations) for e in events)  # plain messages: the latter
    return events


def assert_same_tables(messages: list[Message]) -> None:
    for decoder in DECODERS:
        fresh = received(messages, decoder)  # nothing decoded yet: the fast path reads the messages
        decoded = received(messages, decoder)
        try:
            plain = tuple(Event._unchecked(*e._fields()) for e in decoded)  # every lazy field decoded
        except Exception as exc:  # a field the lazy event cannot decode (a non-ASCII offset): the same error
            with pytest.raises(type(exc)):
                to_arrow(EventBatch(CTX, tuple(fresh)))
            continue
        table = to_arrow(EventBatch(CTX, tuple(fresh)))
        expected = reference([EventBatch(CTX, plain)])
        assert table.equals(expected), (decoder, table.to_pylist(), expected.to_pylist())
        assert to_arrow(EventBatch(CTX, plain)).equals(expected), decoder
        assert to_arrow(EventBatch(CTX, tuple(decoded))).equals(expected), decoder  # fields read already


# -- what the service sends, and odd values ----------------------------------------------------------------------

_text = st.text(max_size=12)
_bytes = st.binary(max_size=12)
_property_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1), _text, _bytes, st.uuids(),
    st.floats(), st.sampled_from([b"\xff\xfe", b"caf\xc3\xa9", "ünï©ode ✓"]),
    st.builds(lambda v: {TYPE: AMQPTypes.long, VALUE: v}, st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: {TYPE: AMQPTypes.timestamp, VALUE: v}, st.integers(0, 2**45)),
    st.builds(lambda v: {TYPE: AMQPTypes.symbol, VALUE: v}, _bytes),
    st.lists(st.integers(-5, 5) | _text, max_size=3),
    st.dictionaries(_text, st.integers(-5, 5) | _text | st.none(), max_size=3),
)
_LIMIT = 2**32 * 1000  # milliseconds converted by multiplying (below) or through a datetime (from here)
_enqueued = st.one_of(
    st.builds(lambda v: {TYPE: AMQPTypes.timestamp, VALUE: v}, st.integers(-(2**40), 2**45)),
    st.builds(lambda v: {TYPE: AMQPTypes.long, VALUE: v}, st.integers(_LIMIT - 10**6, _LIMIT + 10**6)),
    st.integers(-(2**31), 2**31 - 1), st.floats(0, 2**41, allow_nan=False), st.just("not a time"), st.just(True),
)
_keys = st.one_of(_text, _bytes, st.integers(0, 9))


@st.composite
def service_messages(draw: st.DrawFn) -> Message:
    annotations: dict[Any, Any] = {
        b"x-opt-sequence-number": {TYPE: AMQPTypes.long, VALUE: draw(st.integers(0, 2**40))},
    }
    optional = {
        b"x-opt-offset": st.builds(lambda n: str(n).encode(), st.integers(0, 2**50)) | st.integers(0, 9),
        b"x-opt-enqueued-time": _enqueued,
        b"x-opt-partition-key": _text | _bytes | st.just(b"\xff\xfe") | st.integers(0, 9),
        b"x-opt-publisher": _property_values,
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            annotations[key] = draw(values)
    annotations.update(draw(st.dictionaries(_keys, _property_values, max_size=3)))
    props = draw(st.none() | st.builds(
        Properties, message_id=st.none() | st.uuids() | _text | _bytes | st.integers(0, 9),
        user_id=st.none() | _bytes, content_type=st.none() | _bytes | st.just(b"\xff"), subject=st.none() | _text,
        creation_time=st.none() | st.integers(0, 2**45), group_sequence=st.none() | st.integers(0, 9),
    ))
    application = draw(st.none() | st.dictionaries(_text | _bytes, _property_values, max_size=4))
    body = draw(st.lists(st.binary(max_size=20), min_size=1, max_size=2))
    return Message(message_annotations=annotations, properties=props, application_properties=application, data=body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(service_messages(), min_size=1, max_size=4))
def test_received_messages_give_the_table_their_fields_give(messages: list[Message]) -> None:
    assert_same_tables(messages)


def test_a_sent_event_with_the_usual_properties_gives_the_same_table() -> None:
    sent = EventData('{"device": "sensor-1", "t": 21.5}')
    sent.properties = {"type": "reading", "firmware": 3, "ok": True, "ratio": 0.5, "raw": b"\xff", "none": None}
    message = PyamqpTransport.to_outgoing_amqp_message(sent.raw_amqp_message)  # what the SDK's producer sends
    service = {b"x-opt-sequence-number": 41, b"x-opt-offset": b"8800",
               b"x-opt-enqueued-time": {TYPE: AMQPTypes.timestamp, VALUE: 1767225600123},
               b"x-opt-partition-key": "clé", b"x-opt-publisher": b"pub"}
    message = message._replace(message_annotations=service)
    odd = {**service, b"x-opt-sequence-number": "41"}  # a number sent as a string: the lazy field's int()
    assert_same_tables([
        message, message._replace(properties=None, application_properties=None),
        message._replace(message_annotations=odd, data=[b"two ", b"sections"]),
    ])
    table = to_arrow(EventBatch(CTX, tuple(received([message], IN_USE))))
    row = table.to_pylist()[0]
    assert row["enqueuedTime"] == dt.datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)
    assert (row["offset"], row["partitionKey"], row["publisher"]) == ("8800", "clé", "pub")
    assert dict(row["properties"]) == {"type": "reading", "firmware": "3", "ok": "true", "ratio": "0.5",
                                       "raw": "/w==", "none": None}
    assert dict(row["systemProperties"])["x-opt-enqueued-time"] == "1767225600123"


def test_an_annotation_wins_over_the_properties_section_entry_of_the_same_name() -> None:
    message = Message(
        data=[b"x"], properties=Properties(message_id=b"from-properties", content_type=b"text/plain"),
        message_annotations={b"x-opt-sequence-number": 1, b"message-id": b"from-annotations", "x-opt-offset": 7},
    )
    assert_same_tables([message])
    row = to_arrow(EventBatch(CTX, tuple(received([message], IN_USE)))).to_pylist()[0]
    assert row["systemProperties"][0] == ("message-id", "from-annotations")  # first place, last value
    assert row["offset"] == "7"  # an AMQP string key arrives as bytes, as the service's symbols do


def test_enqueued_times_far_from_now_convert_as_through_a_datetime() -> None:
    # past 2**32 s, ms / 1000 as a float is off by more than half a microsecond: fromtimestamp's rounding rules
    times = [0, 1, 1767225600123, _LIMIT - 1, _LIMIT, 198869717949101, 2**45 - 12345, -1500]
    assert_same_tables([
        Message(data=[b"x"], message_annotations={
            b"x-opt-sequence-number": i, b"x-opt-enqueued-time": {TYPE: AMQPTypes.timestamp, VALUE: ms}})
        for i, ms in enumerate(times)
    ])


def test_enqueued_times_are_exact_microseconds_whatever_the_zone() -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    moment = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    expected = (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    assert to_micros(moment) == to_micros(moment.astimezone(plus2)) == to_micros(moment.replace(tzinfo=None))
    assert to_micros(moment) == expected and to_micros(None) is None
    # every millisecond timestamp under 2**32 s converts to exactly ms * 1000 microseconds, as fromtimestamp does
    for ms in (0, 1, 999, 1767225600123, 2**32 * 1000 - 1, 4_000_000_000_123):
        assert to_micros(dt.datetime.fromtimestamp(ms / 1000, dt.UTC)) == ms * 1000
    assert to_micros(dt.datetime(1, 1, 1)) == -62135596800 * 1_000_000
    assert to_micros(1500) == 1500  # anything else as pyarrow reads it (here: microseconds)


def test_plain_events_store_their_enqueued_times_as_to_micros_gives() -> None:
    # plain events hand their datetimes to pyarrow as they are: the column must hold what to_micros gives
    plus2 = dt.timezone(dt.timedelta(hours=2))
    moment = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    times = [moment, moment.astimezone(plus2), moment.replace(tzinfo=None), dt.datetime(1, 1, 1),
             dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=plus2),
             *(dt.datetime.fromtimestamp(ms / 1000, dt.UTC) for ms in (0, 999, 2**32 * 1000 - 1, 4_000_000_000_123))]
    events = tuple(Event(b"x", n, str(n), moment) for n, moment in enumerate(times))
    stored = to_arrow(EventBatch(CTX, events)).column("enqueuedTime").cast(pa.int64()).to_pylist()
    assert stored == [to_micros(t) for t in times]
