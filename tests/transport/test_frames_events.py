"""Events made inside the frame reader (``parse_events``), both builds, against pyamqp's messages wrapped as before.

Property: for any stream of transfers pyamqp encodes, cut into chunks anywhere, ``parse_events`` gives the events
that :func:`rxhubs.transport._events_py.received_messages` makes of ``parse_frames``' messages (same types, same
fields), consumes and hands back the same frames, and gives the last event's delivery annotations as pyamqp
decodes them; where wrapping raises the retriable ``FrameError`` (a message without a sequence number), so does
``parse_events``. The compiled build makes plain events without a ``Message`` tuple, with the annotation keys
the receive path reads as shared objects, out of the garbage collector's care and freed by reference counting.
"""

from __future__ import annotations

import gc
import importlib
import itertools
import sys
from types import ModuleType
from typing import Any

import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from azure.eventhub._pyamqp.message import Message
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs.testing._emulator_frames import emulator_frames
from rxhubs.transport import _events_py
from rxhubs.transport._convert import _ENQUEUED, _OFFSET, _SEQ
from rxhubs.transport._frame_errors import FrameError
from rxhubs.transport._frames import compiled_reader
from tests.transport.test_frames import CHANNEL, HANDLE, messages, transfer

_wrap = _events_py.received_messages


@pytest.fixture(params=["python", "compiled"], scope="module")
def reader(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.transport._framing_" + ("c" if request.param == "compiled" else "py"))
    if request.param == "compiled":  # make test builds it: a missing build is a failure, not a skip
        assert str(module.__file__).endswith(".so") and module is compiled_reader()
    return module


def _frames_of(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(stream):
        size = int.from_bytes(stream[pos:pos + 4], "big")
        out.append(stream[pos:pos + size])
        pos += size
    return out


def _outcome(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # (a field whose value the lazy decoders refuse: both sides alike)
        return type(exc).__name__


def _seen(events: list[Any]) -> list[Any]:
    return [(type(e).__name__, repr(_outcome(e._fields))) for e in events]


def _events_in_chunks(reader: ModuleType, stream: bytes, cuts: list[int]) -> tuple[list[Any], list[Any]]:
    """What a receive loop gets from ``parse_events`` and from ``parse_frames`` + wrapping, chunk by chunk."""
    got: list[Any] = []
    want: list[Any] = []
    pending = b""
    for a, b in itertools.pairwise([0, *sorted(set(cuts)), len(stream)]):
        pending += stream[a:b]
        while True:
            old = reader.parse_frames(pending, CHANNEL, HANDLE)
            try:
                wrapped: Any = _wrap(old[0]) if old[0] else []
            except FrameError as exc:
                wrapped = exc
            try:
                new = reader.parse_events(pending, CHANNEL, HANDLE)
            except FrameError as exc:  # refused where wrapping refused, with the same words
                assert isinstance(wrapped, FrameError) and str(exc) == str(wrapped) and exc.retriable
                return got, want
            assert not isinstance(wrapped, FrameError), wrapped
            assert new[1:5] == old[1:5]  # consumed, handed back, last delivery id, frames
            assert repr(new[5]) == repr(old[0][-1].delivery_annotations if old[0] else None)
            got += _seen(new[0])
            want += _seen(wrapped)
            pending = pending[old[1]:]
            if old[2] is None:
                break
    return got, want


@st.composite
def service_messages(draw: st.DrawFn) -> Message:
    """A generated message that mostly has an int sequence number (and often an offset) among its annotations."""
    m = draw(messages())
    kind = draw(st.integers(0, 4))
    if kind:
        annotations = dict(m.message_annotations or {})
        annotations[_SEQ] = 7 if kind < 3 else {TYPE: AMQPTypes.long, VALUE: 2**40}
        if kind % 2:
            annotations[_OFFSET] = b"4096"
            annotations[_ENQUEUED] = {TYPE: AMQPTypes.timestamp, VALUE: 1_767_225_600_000}
        m = m._replace(message_annotations=annotations)
    return m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(service_messages(), min_size=1, max_size=4), data=st.data())
def test_events_equal_the_wrapped_messages_whatever_the_cuts(
    reader: ModuleType, batch: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(transfer(m, i) for i, m in enumerate(batch))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=3))
    got, want = _events_in_chunks(reader, stream, cuts)
    assert got == want


@pytest.mark.parametrize("metrics", [False, True])
@pytest.mark.parametrize("properties", [0, 5])
def test_events_of_the_emulators_frames(reader: ModuleType, metrics: bool, properties: int) -> None:
    stream = emulator_frames(1024, properties, metrics, count=5)
    events, consumed, other, last, frames, delivery = reader.parse_events(stream, CHANNEL, HANDLE)
    assert (consumed, other, last, frames) == (len(stream), None, 4, 5)
    assert [e.sequence_number for e in events] == list(range(1_000_000, 1_000_005))
    assert [type(e).__name__ for e in events] == ["ReceivedAnnotations" if not properties else "ReceivedMessage"] * 5
    assert all(len(e.body) == 1024 for e in events) and events[2].offset == str(4096 * 2)
    assert events == _wrap(reader.parse_frames(stream, CHANNEL, HANDLE)[0])
    final = _frames_of(stream)[-1]
    assert delivery == decode_payload(decode_frame(memoryview(final)[8:])[1][-1]).delivery_annotations
    assert (b"last_enqueued_sequence_number" in (delivery or {})) is metrics
    for event in events:  # the annotation keys are the receive path's own objects (no bytes made per event)
        annotations = event._data if properties == 0 else event._data.message_annotations
        assert [k for k in annotations if k in (_SEQ, _OFFSET)] == [_SEQ, _OFFSET]
        assert all(any(k is known for known in (_SEQ, _OFFSET, _ENQUEUED)) for k in annotations
                   if k in (_SEQ, _OFFSET, _ENQUEUED))


def test_compiled_events_are_untracked_and_freed_by_reference_counting() -> None:
    reader = compiled_reader()
    assert reader is not None
    stream = emulator_frames(1024, 0, True, count=3)
    events = reader.parse_events(stream, CHANNEL, HANDLE)[0]
    assert not any(gc.is_tracked(e) for e in events)
    first = events[0]
    body, annotations = first.body, first._data
    del events
    assert sys.getrefcount(first) == 2  # this name and the call's argument: the list let go of it
    assert sys.getrefcount(body) == 3 and sys.getrefcount(annotations) == 3  # the event's slot, a name, the call
    del first
    assert sys.getrefcount(body) == 2 and sys.getrefcount(annotations) == 2  # the event took its references along
    python_build = importlib.import_module("rxhubs.transport._framing_py")
    assert all(gc.is_tracked(e) for e in python_build.parse_events(stream, CHANNEL, HANDLE)[0])


def test_a_damaged_annotations_section_is_a_frame_error(reader: ModuleType) -> None:
    """Mid-chunk: the event would have no sequence number; nothing of the chunk is handed on."""
    from rxhubs.testing._fault_corrupt import damage

    first, middle, last = _frames_of(emulator_frames(64, count=3))
    broken = damage(middle, "section")
    assert broken is not None
    with pytest.raises(FrameError, match="no sequence number") as caught:
        reader.parse_events(first + broken + last, CHANNEL, HANDLE)
    assert caught.value.retriable
    assert len(reader.parse_events(first + last, CHANNEL, HANDLE)[0]) == 2
