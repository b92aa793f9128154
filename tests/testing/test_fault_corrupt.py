"""FaultProxy.corrupt's frame tracker: it follows AMQP framing across any chunking and damages one event frame.

Property: a stream of protocol headers and frames (keep-alives, flows, CBS-like transfers, event transfers), cut
into arbitrary chunks, comes out byte for byte the same while unarmed; armed with a kind, it comes out the same
except the first event frame, damaged as ``damage`` says, after which the stream passes untouched.
"""

from __future__ import annotations

import pytest
from azure.eventhub._pyamqp._encode import encode_frame, encode_payload
from azure.eventhub._pyamqp.message import Message
from azure.eventhub._pyamqp.performatives import FlowFrame, TransferFrame
from hypothesis import given
from hypothesis import strategies as st

from rxhubs.errors import ConfigurationError
from rxhubs.testing import FaultProxy
from rxhubs.testing._fault_corrupt import KINDS, OVERSIZE, FrameTracker, damage


def _frame(performative: object, channel: int = 1) -> bytes:
    head, body = encode_frame(performative)
    return bytes(head + channel.to_bytes(2, "big") + (body or b""))


def _transfer(body: bytes, event: bool, delivery_id: int = 0) -> bytes:
    annotations = {b"x-opt-sequence-number": delivery_id} if event else {b"status-code": 200}
    payload = bytes(encode_payload(bytearray(), Message(data=[body], message_annotations=annotations)))
    return _frame(TransferFrame(handle=0, delivery_id=delivery_id, delivery_tag=b"t", payload=payload))


KEEP_ALIVE = bytes([0, 0, 0, 8, 2, 0, 0, 0])
FLOW = _frame(FlowFrame(next_incoming_id=1, incoming_window=10, next_outgoing_id=1, outgoing_window=10))
HEADER = b"AMQP\x00\x01\x00\x00"

frames = st.lists(
    st.one_of(
        st.just(KEEP_ALIVE), st.just(FLOW),
        st.builds(_transfer, st.binary(max_size=300), st.booleans(), st.integers(0, 1000)),
    ),
    max_size=12,
)


def _through(tracker: FrameTracker, stream: bytes, cuts: list[int], kind: str | None) -> tuple[bytes, int]:
    out, damaged, at = bytearray(), 0, 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        if cut <= at:
            continue
        piece, hit = tracker.feed(stream[at:cut], kind)
        out += piece
        damaged += hit
        at = cut
    return bytes(out), damaged


@given(frames, st.lists(st.integers(0, 10_000), max_size=20))
def test_unarmed_the_stream_passes_unchanged(body: list[bytes], cuts: list[int]) -> None:
    stream = HEADER + b"".join(body)
    out, damaged = _through(FrameTracker(), stream, cuts, None)
    assert out == stream and damaged == 0


@given(frames, st.lists(st.integers(0, 10_000), max_size=20), st.sampled_from(KINDS))
def test_armed_only_the_first_event_frame_is_damaged(body: list[bytes], cuts: list[int], kind: str) -> None:
    stream = HEADER + b"".join(body)
    out, damaged = _through(FrameTracker(), stream, cuts, kind)
    expected, seen = bytearray(HEADER), False
    for frame in body:
        broken = None if seen else damage(frame, kind)
        seen = seen or broken is not None
        expected += broken if broken is not None else frame
    assert out == bytes(expected)
    assert damaged == int(seen)


def test_a_connection_armed_midway_damages_the_next_whole_event_frame() -> None:
    event = _transfer(b"x" * 100, True, 3)
    stream = HEADER + FLOW + event + event
    tracker = FrameTracker()
    first, _ = tracker.feed(stream[:len(HEADER) + len(FLOW) + 10], None)  # unarmed: inside the first event
    rest, damaged = tracker.feed(stream[len(first):], "oversize")
    assert damaged and first + rest == HEADER + FLOW + event + damage(event, "oversize")  # type: ignore[operator]
    assert int.from_bytes(rest[len(event) - 10:][:4], "big") == OVERSIZE


def test_kinds_and_counts_are_checked() -> None:
    proxy = FaultProxy("127.0.0.1", 5672)
    with pytest.raises(ConfigurationError, match="corrupt kind must be one of flip, truncate, oversize, section"):
        proxy.corrupt("shred")
    with pytest.raises(ConfigurationError, match="count must be an integer >= 1"):
        proxy.corrupt("flip", count=0)
    proxy.corrupt("flip", count=3)
    assert proxy.mode == "corrupt(flip x3,downstream)"
    proxy.heal()
    assert proxy.mode == "pass"
