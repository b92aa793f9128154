"""Arrow straight from transfer frames, both builds (Python and compiled), against pyamqp and the events' path.

Property: for any stream of transfer frames of service-stamped messages, cut into chunks at any byte, the record
batch :class:`FrameColumns` builds (with the frames it hands back decoded by pyamqp and added as rows, as the
receive loop does) equals :func:`~rxhubs.spark.to_arrow` of the same messages decoded by pyamqp and received as
events (itself held to the documented rules by ``test_arrow_columns.py``). Garbage raises :class:`FrameError`
and nothing else.
"""

from __future__ import annotations

import importlib
import itertools
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from azure.eventhub._pyamqp.message import Message, Properties
from azure.eventhub._pyamqp.performatives import FlowFrame
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs import EventBatch, PartitionContext
from rxhubs.spark import to_arrow
from rxhubs.spark._arrow_batch import message_row, record_batch, slow_row
from rxhubs.transport._convert_messages import received_messages
from rxhubs.transport._frame_errors import FrameError
from tests.spark.test_arrow_columns import service_messages
from tests.transport.test_frames import CHANNEL, HANDLE, frame, messages, transfer

CTX = PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "2")


@pytest.fixture(params=["python", "compiled"], scope="module")
def build(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.spark._arrow_frames_" + ("c" if request.param == "compiled" else "py"))
    values = importlib.import_module("rxhubs.spark._arrow_values_" + ("c" if request.param == "compiled" else "py"))
    if request.param == "compiled":  # make builds it: a missing build is a failure, not a skip
        for m in (module, values):
            assert str(m.__file__).endswith(".so"), f"the compiled Arrow builder was not built: {m.__file__}"
    else:  # the Python build runs with the Python build of its other half, compiled or not
        assert module.Buf is values.Buf and module.Buf.__module__ == "rxhubs.spark._arrow_values_py"
        assert not str(module.__file__).endswith(".so")
    return module


def test_both_halves_agree_on_the_kinds() -> None:
    py = importlib.import_module("rxhubs.spark._arrow_frames_py")
    values = importlib.import_module("rxhubs.spark._arrow_values_py")
    kinds = (py.K_NULL, py.K_TRUE, py.K_FALSE, py.K_UINT, py.K_INT, py.K_BYTES, py.K_OTHER)
    assert kinds == values.KINDS


def reference(stream: bytes) -> Any:
    """pyamqp's reading of our link's transfers, as events, through to_arrow (raises what that raises)."""
    decoded = []
    pos = 0
    while pos < len(stream):
        size = int.from_bytes(stream[pos:pos + 4], "big")
        channel = int.from_bytes(stream[pos + 6:pos + 8], "big")
        if size > 8:
            kind, fields = decode_frame(memoryview(stream[pos + 8:pos + size]))
            if kind == 20 and channel == CHANNEL and fields[0] == HANDLE:
                decoded.append(decode_payload(fields[-1]))
        pos += size
    return to_arrow(EventBatch(CTX, tuple(received_messages(decoded))))


def read_in_chunks(build: ModuleType, stream: bytes, cuts: list[int]) -> Any:
    """What the receive loop builds when the stream arrives cut at ``cuts`` (handed-back frames as rows)."""
    columns = build.FrameColumns(slow_row)
    pending = b""
    batches = []
    edges = [0, *sorted(set(cuts)), len(stream)]
    for a, b in itertools.pairwise(edges):
        pending += stream[a:b]
        while True:
            _, consumed, other, _ = columns.parse(pending, CHANNEL, HANDLE)
            pending = pending[consumed:]
            if other is None:
                break
            channel, raw = other
            kind, fields = decode_frame(memoryview(raw[8:]))
            if kind == 20 and channel == CHANNEL and fields[0] == HANDLE:  # handed back: what the SDK appends
                columns.append_row(*message_row(decode_payload(fields[-1])))
        if columns.rows and b % 3 == 0:  # take now and then: batches of any size, buffers started anew
            batches.append(record_batch(columns.take(), CTX.partition_id, CTX.consumer_group, CTX.eventhub_name))
    assert pending == b""
    batches.append(record_batch(columns.take(), CTX.partition_id, CTX.consumer_group, CTX.eventhub_name))
    for batch in batches:
        batch.validate(full=True)  # offsets, UTF-8, validity: what Spark will read
    return pa.Table.from_batches(batches).combine_chunks()


def assert_same(build: ModuleType, stream: bytes, cuts: list[int]) -> None:
    try:
        want = reference(stream)
    except Exception as exc:  # an event the events' path cannot read either (a non-ASCII offset...)
        with pytest.raises(FrameError) as caught:
            read_in_chunks(build, stream, cuts)
        assert type(exc).__name__ in str(caught.value)
        return
    got = read_in_chunks(build, stream, cuts)
    assert got.equals(want.combine_chunks()), (got.to_pylist()[:2], want.to_pylist()[:2])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(service_messages(), min_size=1, max_size=5), data=st.data())
def test_tables_equal_the_events_tables_whatever_the_cuts(
    build: ModuleType, batch: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(transfer(m, i) for i, m in enumerate(batch))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    assert_same(build, stream, cuts)


_usual_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1), st.text(max_size=8), st.binary(max_size=6),
    st.builds(lambda v: {TYPE: AMQPTypes.long, VALUE: v}, st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: {TYPE: AMQPTypes.ulong, VALUE: v}, st.integers(0, 2**64 - 1)),
    st.builds(lambda v: {TYPE: AMQPTypes.timestamp, VALUE: v}, st.integers(0, 2**45)),
    st.builds(lambda v: {TYPE: AMQPTypes.symbol, VALUE: v}, st.text(max_size=6).map(str.encode)),
)


@st.composite
def usual_messages(draw: st.DrawFn) -> Message:
    """The shapes the builder writes itself (mostly): one data section, text keys, the usual value types."""
    annotations: dict[Any, Any] = {
        b"x-opt-sequence-number": {TYPE: AMQPTypes.long, VALUE: draw(st.integers(0, 2**40))},
        b"x-opt-offset": str(draw(st.integers(0, 2**50))).encode(),
        b"x-opt-enqueued-time": {TYPE: AMQPTypes.timestamp, VALUE: draw(st.integers(0, 2**42))},
    }
    if draw(st.booleans()):
        annotations[b"x-opt-partition-key"] = draw(st.none() | st.text(max_size=8))
    if draw(st.booleans()):
        annotations[b"x-opt-publisher"] = draw(_usual_values)
    annotations.update(draw(st.dictionaries(st.text(max_size=8).map(str.encode), _usual_values, max_size=3)))
    props = draw(st.none() | st.builds(
        Properties, message_id=st.none() | st.text(max_size=6) | st.integers(0, 9), user_id=st.none() | st.binary(
            max_size=4), content_type=st.none() | st.text(max_size=4).map(str.encode), subject=st.none() | st.text(
            max_size=4), creation_time=st.none() | st.integers(0, 2**45), group_sequence=st.none() | st.integers(0, 9),
    ))
    application = draw(st.none() | st.dictionaries(st.text(max_size=8), _usual_values, max_size=4))
    body = draw(st.binary(max_size=300))
    return Message(message_annotations=annotations, properties=props, application_properties=application, data=[body])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(usual_messages(), min_size=1, max_size=6), data=st.data())
def test_usual_events_equal_the_events_tables_whatever_the_cuts(
    build: ModuleType, batch: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(transfer(m, i) for i, m in enumerate(batch))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=3))
    assert_same(build, stream, cuts)


def _stamped(message: Message, n: int) -> Message:
    """Any message pyamqp encodes, with the annotations the service adds (or its own, when it has them)."""
    service = {b"x-opt-sequence-number": {TYPE: AMQPTypes.long, VALUE: n}, b"x-opt-offset": str(n * 64).encode()}
    return message._replace(message_annotations={**service, **(message.message_annotations or {})})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(messages(), min_size=1, max_size=3), flow=st.booleans())
def test_any_message_shape_gives_the_events_table(build: ModuleType, batch: list[Message], flow: bool) -> None:
    """Headers, footers, value and sequence bodies, odd annotations: the general way, or handed back."""
    frames = [transfer(_stamped(m, i), i) for i, m in enumerate(batch)]
    if flow:  # another performative in between: handed back, the order kept
        frames.insert(1, frame(FlowFrame(next_incoming_id=1, incoming_window=10, next_outgoing_id=1,
                                         outgoing_window=10)))
    assert_same(build, b"".join(frames), [])


def test_the_usual_event_is_written_natively(build: ModuleType) -> None:
    """The emulator's own frames never take the general way (every value is one the builder writes itself)."""
    from rxhubs.testing._emulator_frames import emulator_frames

    def refuse(data: bytes, pos: int, end: int) -> Any:
        raise AssertionError("the general way was taken")

    for size, properties, metrics in ((0, 0, False), (1024, 5, True), (70_000, 2, False)):
        columns = build.FrameColumns(refuse)
        stream = emulator_frames(size, properties, metrics, count=4)
        assert columns.parse(stream, CHANNEL, HANDLE)[:3] == (4, len(stream), None)
        got = pa.Table.from_batches([record_batch(columns.take(), "2", "$Default", "telemetry")])
        assert got.equals(reference(stream))


def test_odd_values_take_the_general_way_and_give_the_same_row(build: ModuleType) -> None:
    odd = [
        Message(data=[b"x"], application_properties={"f": 1.5, "u": b"\xff", "n": None, "b": True}),
        Message(data=[b"x"], application_properties={b"k": 1, "k": 2}),  # the same key twice (last wins)
        Message(data=[b"a", b"b"]),  # two data sections
        Message(data=[b"x"], properties=Properties(message_id=b"m", to=b"\xffto")),
        Message(data=[b"x"], message_annotations={b"x-opt-partition-key": 7, b"x-opt-publisher": b"\xfe"}),
        Message(value={"a": [1, 2]}),
    ]
    calls = []

    def counting(data: bytes, pos: int, end: int) -> Any:
        calls.append(pos)
        return slow_row(data, pos, end)

    stream = b"".join(transfer(_stamped(m, i), i) for i, m in enumerate(odd))
    columns = build.FrameColumns(counting)
    assert columns.parse(stream, CHANNEL, HANDLE)[:3] == (len(odd), len(stream), None)
    assert len(calls) == len(odd)
    got = pa.Table.from_batches([record_batch(columns.take(), "2", "$Default", "telemetry")])
    assert got.equals(reference(stream))


def test_rows_of_a_batch_are_rolled_back_when_a_frame_is_handed_back(build: ModuleType) -> None:
    from rxhubs.transport._frame_errors import Unsupported

    def unsupported(data: bytes, pos: int, end: int) -> Any:
        raise Unsupported("the SDK's")

    good = transfer(_stamped(Message(data=[b"ok"]), 1), 1)
    late = transfer(_stamped(Message(data=[b"x"], application_properties={"f": 1.5}), 2), 2)  # written, then not
    columns = build.FrameColumns(unsupported)
    rows, consumed, other, last = columns.parse(good + late + good, CHANNEL, HANDLE)
    assert (rows, consumed, other, last) == (1, len(good) + len(late), (CHANNEL, late), 1)
    table = pa.Table.from_batches([record_batch(columns.take(), "2", "$Default", "telemetry")])
    assert table.column("body").to_pylist() == [b"ok"] and table.column("properties").to_pylist() == [[]]


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(min_size=8, max_size=200), message=service_messages())
def test_arbitrary_bytes_never_raise_anything_but_frame_error(
    build: ModuleType, garbage: bytes, message: Message
) -> None:
    good = transfer(message, 1)
    for buf in (garbage, good[:8] + garbage, good[:30] + garbage[: max(0, len(good) - 30)],
                good[:-len(garbage)] + garbage if len(garbage) < len(good) else garbage):
        columns = build.FrameColumns(slow_row)
        try:
            rows, _, _, _ = columns.parse(buf, CHANNEL, HANDLE)
        except FrameError:
            continue
        if rows:  # whatever was accepted makes a valid batch
            record_batch(columns.take(), "2", "$Default", "telemetry").validate(full=True)


def test_truncated_inside_a_frame_raises_frame_error(build: ModuleType) -> None:
    whole = transfer(_stamped(Message(data=[b"abcdef"], application_properties={"k": "v"}), 3), 3)
    for cut in range(12, len(whole)):  # the frame's size says whole, its content stops at cut
        short = cut.to_bytes(4, "big") + whole[4:cut]
        columns = build.FrameColumns(slow_row)
        try:
            rows, _, other, _ = columns.parse(short, CHANNEL, HANDLE)
        except FrameError:
            assert columns.rows == 0  # nothing half-written stays
            continue
        assert other is not None or rows == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=12) | st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_the_utf8_check_is_pythons(raw: bytes) -> None:
    from rxhubs.spark._arrow_values_py import ValueReader

    reader = ValueReader()
    reader.v = raw
    try:
        raw.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert reader.utf8(0, len(raw)) == valid
