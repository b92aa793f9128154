"""The send path's encoder, both builds (Python and compiled), against azure-eventhub's own encoder and decoder.

Property: for any run of events (bodies, application properties, partition key) and any link limits, the frames
:func:`batch_frames` returns are byte for byte what azure-eventhub sends for the same events put through
``EventDataBatch.add`` (a new batch when one is full) and ``send_batch``: pyamqp's ``encode_payload`` of each
batch message, split into transfer frames as pyamqp's session splits a delivery. And pyamqp's decoder reads every
event back from those frames.
"""

from __future__ import annotations

import importlib
import struct
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from azure.eventhub import EventData, EventDataBatch
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from azure.eventhub._pyamqp._encode import encode_frame, encode_payload
from azure.eventhub._pyamqp.performatives import TransferFrame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs.transport._frame_errors import Unsupported

BATCH = 0x80013700


@pytest.fixture(params=["python", "compiled"], scope="module")
def encoder(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.transport._encode_" + ("c" if request.param == "compiled" else "py"))
    if request.param == "compiled":  # make test builds it: a missing build is a failure, not a skip
        assert str(module.__file__).endswith(".so"), f"the compiled encoder was not built: {module.__file__}"
    else:
        assert str(module.__file__).endswith("_encode_py.py")
    return module


def _event(body: bytes, properties: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(body=body, properties=properties or {})


# -- what azure-eventhub sends for the same events ------------------------------------------------------------


def _sdk_batches(events: list[Any], key: str | None, max_message: int) -> list[tuple[bytes, int]]:
    """Each batch message pyamqp encodes, and the index after its last event (as a sender fills batches)."""
    out: list[tuple[bytes, int]] = []
    i = 0
    while i < len(events):
        batch = EventDataBatch(partition_key=key, max_size_in_bytes=max_message)
        first = i
        while i < len(events):
            data = EventData(events[i].body)
            if events[i].properties:
                data.properties = dict(events[i].properties)
            try:
                batch.add(data)
            except ValueError:
                break
            i += 1
        if i == first:
            break
        out.append((bytes(encode_payload(bytearray(), batch._message)), i))
    return out


def _sdk_frames(payload: bytes, channel: int, handle: int, delivery_id: int, tag: int, max_frame: int) -> bytes:
    """The transfer frames of one delivery, as azure-eventhub's pyamqp session splits it (_session_async.py)."""
    fields = {
        "handle": handle, "delivery_id": delivery_id, "delivery_tag": struct.pack(">I", tag),
        "message_format": BATCH, "settled": False, "more": False, "rcv_settle_mode": None, "state": None,
        "resume": None, "aborted": None, "batchable": None,
    }
    overhead = len(encode_frame(TransferFrame(payload=b"", **fields))[1])  # type: ignore[arg-type]
    room = max_frame - overhead - 8
    out = bytearray()
    start = 0
    while len(payload) - start > room:
        head, body = encode_frame(TransferFrame(payload=payload[start:start + room], **{**fields, "more": True}))
        out += head + struct.pack(">H", channel) + body  # type: ignore[operator]
        start += room
    head, body = encode_frame(TransferFrame(payload=payload[start:], **fields))  # type: ignore[arg-type]
    out += head + struct.pack(">H", channel) + body  # type: ignore[operator]
    return bytes(out)


def _read_back(data: bytes) -> list[tuple[Any, ...]]:
    """Every delivery in ``data`` decoded by pyamqp: (delivery id, tag, format, the events' messages)."""
    deliveries: list[tuple[Any, ...]] = []
    pos, parts, first = 0, bytearray(), None
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        frame = decode_frame(memoryview(data)[pos + 8:pos + size])
        assert frame[0] == 0x14
        fields = frame[1]
        first = first or fields
        parts += fields[11]
        if not fields[5]:  # more
            outer = decode_payload(memoryview(bytes(parts)))
            inner = [decode_payload(memoryview(d)) for d in outer.data or []]
            deliveries.append((first[1], first[2], first[3], outer, inner))
            parts, first = bytearray(), None
        pos += size
    assert pos == len(data)
    return deliveries


# -- generated events ---------------------------------------------------------------------------------------

_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1), st.floats(allow_nan=False),
    st.text(max_size=300), st.binary(max_size=300),
)
_properties = st.dictionaries(st.text(max_size=20), _values, max_size=5)
_bodies = st.one_of(st.binary(max_size=40), st.binary(min_size=250, max_size=700))
_events = st.lists(st.builds(_event, _bodies, _properties), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=_events,
    key=st.one_of(st.none(), st.text(min_size=1, max_size=300)),
    max_message=st.integers(600, 6000),
    max_frame=st.integers(512, 4096),
    channel=st.integers(0, 65535),
    handle=st.integers(0, 2**32 - 1),
    delivery_id=st.integers(0, 2**32 - 1),
    tag=st.integers(0, 2**32 - 1),
)
def test_frames_are_what_azure_eventhub_sends(
    encoder: ModuleType, events: list[Any], key: str | None, max_message: int, max_frame: int, channel: int,
    handle: int, delivery_id: int, tag: int,
) -> None:
    expected = _sdk_batches(events, key, max_message)
    data, ends = encoder.batch_frames(
        events, 0, key, max_message, max_frame, channel, handle, delivery_id, tag, 1000
    )
    assert ends == [end for _, end in expected]
    mask = 0xFFFFFFFF
    reference = b"".join(
        _sdk_frames(payload, channel, handle, (delivery_id + i) & mask, (tag + i) & mask, max_frame)
        for i, (payload, _) in enumerate(expected)
    )
    assert data == reference
    # and pyamqp's decoder reads each event back
    back = _read_back(data)
    assert [d[0] for d in back] == [(delivery_id + i) & mask for i in range(len(ends))]
    assert [d[1] for d in back] == [struct.pack(">I", (tag + i) & mask) for i in range(len(ends))]
    messages = [m for d in back for m in d[4]]
    sent = events[:ends[-1]] if ends else []
    assert [m.data for m in messages] == [[e.body] for e in sent]
    assert [m.application_properties or {} for m in messages] == [
        {k.encode(): v.encode() if isinstance(v, str) else v for k, v in e.properties.items()} for e in sent
    ]
    for d in back:
        annotations = d[3].message_annotations
        assert (annotations or {}).get(b"x-opt-partition-key") == (key.encode() if key else None)


@settings(max_examples=60, deadline=None)
@given(events=_events, start=st.integers(0, 5), most=st.integers(1, 4), key=st.one_of(st.none(), st.text(max_size=8)))
def test_a_run_starts_where_asked_and_stops_at_the_delivery_count(
    encoder: ModuleType, events: list[Any], start: int, most: int, key: str | None
) -> None:
    start = min(start, len(events))
    data, ends = encoder.batch_frames(events, start, key or None, 1200, 65536, 0, 0, 0, 0, most)
    full, all_ends = encoder.batch_frames(events[start:], 0, key or None, 1200, 65536, 0, 0, 0, 0, 1000)
    assert len(ends) == min(most, len(all_ends))
    assert [e - start for e in ends] == all_ends[:len(ends)]
    assert full.startswith(data)


@settings(max_examples=80, deadline=None)
@given(events=_events, shared=st.one_of(st.none(), _properties), start=st.integers(0, 5), most=st.integers(1, 4),
       key=st.one_of(st.none(), st.text(max_size=8)), max_message=st.integers(600, 3000))
def test_columns_give_the_bytes_of_the_same_events(
    encoder: ModuleType, events: list[Any], shared: dict[str, Any] | None, start: int, most: int, key: str | None,
    max_message: int,
) -> None:
    # a bulk send: bodies and one mapping for all (``shared``), or one mapping per event, against the events' path
    start = min(start, len(events))
    bodies = [e.body for e in events]
    if shared is not None:
        events = [_event(b, shared) for b in bodies]
        properties: Any = shared
    else:
        properties = [e.properties for e in events]
    args = (start, key or None, max_message, 2048, 3, 5, 7, 9, most)
    assert encoder.batch_frames_columns(bodies, properties, *args) == encoder.batch_frames(events, *args)


def test_integers_beyond_32_bits_go_as_longs(encoder: ModuleType) -> None:
    data, _ = encoder.batch_frames(
        [_event(b"x", {"big": 2**40, "low": -(2**63), "int": 7})], 0, None, 4096, 4096, 0, 0, 0, 0, 1
    )
    (message,) = _read_back(data)[0][4]
    assert message.application_properties == {b"big": 2**40, b"low": -(2**63), b"int": 7}


@pytest.mark.parametrize("properties", [{"t": [1, 2]}, {"t": {"a": 1}}, {"t": 2**64}, {1: "x"}, {"t": object()}])
def test_what_the_encoder_does_not_take_is_unsupported(encoder: ModuleType, properties: dict[Any, Any]) -> None:
    with pytest.raises(Unsupported):
        encoder.batch_frames([_event(b"x", properties)], 0, None, 4096, 4096, 0, 0, 0, 0, 1)


def test_a_body_that_is_not_bytes_is_unsupported(encoder: ModuleType) -> None:
    with pytest.raises(Unsupported):
        encoder.batch_frames([SimpleNamespace(body=bytearray(b"x"), properties={})], 0, None, 4096, 4096, 0, 0,
                             0, 0, 1)


def test_an_event_over_the_maximum_message_size_ends_the_run(encoder: ModuleType) -> None:
    small, large = _event(b"s" * 10), _event(b"L" * 2000)
    assert encoder.batch_frames([large], 0, None, 1000, 4096, 0, 0, 0, 0, 5) == (b"", [])
    data, ends = encoder.batch_frames([small, small, large, small], 0, None, 1000, 4096, 0, 0, 0, 0, 5)
    assert ends == [2]
    assert len(_read_back(data)) == 1


def test_both_builds_give_the_same_bytes() -> None:
    python = importlib.import_module("rxhubs.transport._encode_py")
    compiled = importlib.import_module("rxhubs.transport._encode_c")
    assert str(compiled.__file__).endswith(".so")
    events = [_event(bytes([i % 256]) * (i * 37 % 900), {"i": i, "s": "x" * (i % 300)}) for i in range(300)]
    for key in (None, "device-7"):
        assert python.batch_frames(events, 3, key, 50_000, 8192, 3, 9, 2**32 - 2, 5, 99) == compiled.batch_frames(
            events, 3, key, 50_000, 8192, 3, 9, 2**32 - 2, 5, 99
        )


@pytest.mark.parametrize("key", [None, "k"])
@pytest.mark.parametrize("slack", [0, 1])
def test_a_batch_message_fills_to_exactly_the_maximum_size(encoder: ModuleType, key: str | None, slack: int) -> None:
    events = [_event(b"e" * 100) for _ in range(3)]
    (payload, _), *_ = _sdk_batches(events, key, 10**6)
    limit = len(payload) - 1 + slack  # all three fit only when the limit is the batch's exact size
    _, ends = encoder.batch_frames(events, 0, key, limit, 65536, 0, 0, 0, 0, 9)
    assert ends == ([3] if slack else [2, 3])
    assert [end for _, end in _sdk_batches(events, key, limit)] == ends
