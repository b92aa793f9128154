"""Multi-frame deliveries in the frame reader, both builds: joined natively, split at every boundary.

Property: a delivery whose payload is split over transfer frames at any byte (every boundary of the payload,
and random splits into many frames), with keep-alives in between and single-frame messages around it, read from
a stream cut into chunks anywhere, gives the messages pyamqp decodes from the whole payload, in order; the frame
count covers every transfer frame; nothing is consumed before a delivery's last frame is there. Deliveries the
reader must not join (another link's frame in between, an aborted transfer) go back to the SDK, first frame first.
"""

from __future__ import annotations

import importlib
import itertools
from types import ModuleType
from typing import Any

import pytest
from azure.eventhub._pyamqp._decode import decode_payload
from azure.eventhub._pyamqp._encode import encode_frame, encode_payload
from azure.eventhub._pyamqp.message import Message
from azure.eventhub._pyamqp.performatives import FlowFrame, TransferFrame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHANNEL, HANDLE = 1, 0
KEEP_ALIVE = b"\x00\x00\x00\x08\x02\x00\x00\x00"


@pytest.fixture(params=["python", "compiled"], scope="module")
def reader(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.transport._framing_" + ("c" if request.param == "compiled" else "py"))
    assert str(module.__file__).endswith(".so" if request.param == "compiled" else "_framing_py.py")
    return module


def _frame(payload: bytes, delivery_id: int | None, more: bool, **fields: Any) -> bytes:
    channel = fields.pop("channel", CHANNEL)
    tag = None if delivery_id is None else delivery_id.to_bytes(4, "big")
    head, body = encode_frame(TransferFrame(
        handle=fields.pop("handle", HANDLE), delivery_id=delivery_id, delivery_tag=tag, message_format=0,
        settled=False, more=more, payload=payload, **fields,
    ))
    return head + channel.to_bytes(2, "big") + body  # type: ignore[operator]


def _split(payload: bytes, cuts: list[int], delivery_id: int, ids_on_every_frame: bool = True) -> bytes:
    edges = [0, *sorted(set(c for c in cuts if 0 < c < len(payload))), len(payload)]
    parts = [payload[a:b] for a, b in itertools.pairwise(edges)]
    return b"".join(
        _frame(part, delivery_id if i == 0 or ids_on_every_frame else None, i < len(parts) - 1)
        for i, part in enumerate(parts)
    )


def _payload(message: Message) -> bytes:
    return bytes(encode_payload(bytearray(), message))


def _read(reader: ModuleType, stream: bytes, cuts: list[int]) -> tuple[list[Any], int]:
    """Messages (repr) and transfer frames a receive loop gets when ``stream`` arrives cut at ``cuts``."""
    out: list[Any] = []
    frames = 0
    pending = b""
    for a, b in itertools.pairwise([0, *sorted(set(cuts)), len(stream)]):
        pending += stream[a:b]
        messages, consumed, other, _, count = reader.parse_frames(pending, CHANNEL, HANDLE)
        assert other is None
        out.extend(repr(m) for m in messages)
        frames += count
        pending = pending[consumed:]
    assert pending == b""
    return out, frames


_messages = st.builds(
    lambda data, app, annotations: Message(data=data, application_properties=app, message_annotations=annotations),
    st.lists(st.binary(max_size=120), min_size=1, max_size=3),
    st.none() | st.dictionaries(st.text(max_size=8), st.integers(-5, 5), max_size=3),
    st.none() | st.dictionaries(st.binary(min_size=1, max_size=8), st.text(max_size=8), max_size=2),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=_messages, ids=st.booleans())
def test_a_delivery_split_in_two_at_every_boundary_is_joined(reader: ModuleType, message: Message, ids: bool) -> None:
    payload = _payload(message)
    want = repr(decode_payload(memoryview(payload)))
    before = _frame(_payload(Message(data=[b"before"])), 1, False)
    for cut in range(1, len(payload)):
        stream = before + _split(payload, [cut], 2, ids) + KEEP_ALIVE
        messages, consumed, other, last, frames = reader.parse_frames(stream, CHANNEL, HANDLE)
        assert [repr(m) for m in messages][1:] == [want] and consumed == len(stream)
        assert (other, last, frames) == (None, 2, 3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=_messages, data=st.data())
def test_a_delivery_in_many_frames_read_in_any_chunks_equals_pyamqps_message(
    reader: ModuleType, message: Message, data: st.DataObject
) -> None:
    payload = _payload(message)
    splits = data.draw(st.lists(st.integers(1, max(1, len(payload) - 1)), max_size=6))
    delivery = _split(payload, splits, 7)
    frames_of = _frames_of(delivery)
    if len(frames_of) > 1 and data.draw(st.booleans()):  # a keep-alive between two frames of the delivery
        delivery = frames_of[0] + KEEP_ALIVE + b"".join(frames_of[1:])
    after = _frame(_payload(Message(data=[b"after"])), 8, False)
    stream = delivery + after
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=5))
    got, frames = _read(reader, stream, cuts)
    assert got == [repr(decode_payload(memoryview(payload))), repr(decode_payload(memoryview(_payload(
        Message(data=[b"after"])))))]
    assert frames == len(_frames_of(stream))


def _frames_of(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(stream):
        size = int.from_bytes(stream[pos:pos + 4], "big")
        if size > 8:
            out.append(stream[pos:pos + size])
        pos += size
    return out


def test_nothing_is_consumed_before_the_last_frame(reader: ModuleType) -> None:
    payload = _payload(Message(data=[b"x" * 300]))
    first = _frame(_payload(Message(data=[b"first"])), 1, False)
    stream = first + _split(payload, [100, 200], 2)
    for end in range(len(first), len(stream)):
        messages, consumed, other, last, frames = reader.parse_frames(stream[:end], CHANNEL, HANDLE)
        assert (len(messages), consumed, other, last, frames) == (1, len(first), None, 1, 1)
    assert reader.parse_frames(stream, CHANNEL, HANDLE)[4] == 4


@pytest.mark.parametrize("between", ["flow", "other link", "aborted", "another delivery"])
def test_a_delivery_the_reader_must_not_join_goes_back_first_frame_first(reader: ModuleType, between: str) -> None:
    payload = _payload(Message(data=[b"y" * 200]))
    one, two = _frame(payload[:90], 3, True), _frame(payload[90:], 3, False)
    if between == "aborted":
        two = _frame(payload[90:], 3, False, aborted=True)
        inserted = b""
    elif between == "another delivery":  # a protocol error: the SDK says what it makes of it
        two = _frame(payload[90:], 4, False)
        inserted = b""
    elif between == "flow":
        head, body = encode_frame(FlowFrame(next_incoming_id=1, incoming_window=10, next_outgoing_id=1,
                                            outgoing_window=10, handle=HANDLE, delivery_count=0, link_credit=9))
        inserted = head + CHANNEL.to_bytes(2, "big") + body  # type: ignore[operator]
    else:
        inserted = _frame(payload, 9, False, handle=HANDLE + 1)
    stream = one + inserted + two
    messages, consumed, other, last, frames = reader.parse_frames(stream, CHANNEL, HANDLE)
    assert (messages, consumed, other, last, frames) == ([], len(one), (CHANNEL, one), None, 0)


def test_parse_keeps_its_four_values(reader: ModuleType) -> None:
    payload = _payload(Message(data=[b"z" * 50]))
    stream = _split(payload, [10], 4)
    messages, consumed, other, last = reader.parse(stream, CHANNEL, HANDLE)
    assert ([m.data for m in messages], consumed, other, last) == ([[b"z" * 50]], len(stream), None, 4)
