"""The native path's events: wrapped by the compiled ``_events_c`` (one source with ``_events_py``), handed over in
the read, and out of the garbage collector's care (an event cannot be part of a reference cycle)."""

from __future__ import annotations

import gc
import sys

import pytest
from azure.eventhub._pyamqp.message import Message, Properties

from rxhubs import Event, Position
from rxhubs.emulator.pytest_plugin import EmulatorFactory, emulator_factory  # noqa: F401  (fixture)
from rxhubs.testing._emulator_frames import emulator_frames
from rxhubs.transport import EventHub, _events_py
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, compiled_reader, event_wrapper

_MESSAGES = [
    Message(data=[b"plain"], message_annotations={b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"}),
    Message(data=[b"a", b"b"], message_annotations={b"x-opt-sequence-number": 8}),  # two data sections
    Message(data=[b"p"], message_annotations={b"x-opt-sequence-number": 9}, application_properties={b"k": 1},
            properties=Properties(message_id=b"m-1")),
]


@pytest.fixture(autouse=True)
def native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NO_EXTENSIONS_VARIABLE, raising=False)
    assert compiled_reader() is not None, "make test builds the compiled frame reader; it is missing"


def test_both_builds_make_the_same_events() -> None:
    compiled = event_wrapper()
    assert compiled is not _events_py.received_messages and compiled.__module__ == "rxhubs.transport._events_c"
    for ours, theirs in zip(compiled(_MESSAGES), _events_py.received_messages(_MESSAGES), strict=True):
        assert type(ours) is type(theirs)
        assert ours == theirs == Event(*theirs._fields())  # every field, decoded
    assert [e.body for e in compiled(_MESSAGES)] == [b"plain", b"ab", b"p"]


def test_compiled_events_are_untracked_and_still_freed() -> None:
    events = event_wrapper()(_MESSAGES)
    assert [gc.is_tracked(e) for e in events] == [False, False, False]
    assert all(gc.is_tracked(e) for e in _events_py.received_messages(_MESSAGES))  # the pure build leaves them
    first = events[0]
    del events
    assert sys.getrefcount(first) == 2  # held by this name only (and the call): reference counting frees it


async def test_events_read_natively_are_untracked(emulator_factory: EmulatorFactory) -> None:  # noqa: F811
    emulator = emulator_factory(hubs={"gc": 1})
    async with EventHub.from_connection_string(emulator.connection_string("gc")) as hub:
        await hub.send([b"%d" % i for i in range(300)], partition_id="0")
        async with hub.receiver("0", start=Position.earliest(), prefetch=100) as receiver:
            got: list[Event] = []
            for _ in range(100):
                got += await receiver.receive_batch(500, max_wait=5)
                if len(got) >= 300:
                    break
            assert [e.sequence_number for e in got] == list(range(300))
            assert receiver._native_link is not None and receiver._native_link.messages == 300
            assert receiver._native_link._parse.__name__ == "parse_events"  # made in the reader, no Message tuples
            assert not any(gc.is_tracked(e) for e in got)
            assert receiver._buffered <= 100 + 300  # handed over in the read, bounded by the credit


def _frames_of(chunk: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(chunk):
        size = int.from_bytes(chunk[pos:pos + 4], "big")
        out.append(chunk[pos:pos + size])
        pos += size
    return out


@pytest.mark.parametrize("metrics", [False, True])
def test_an_event_whose_annotations_section_code_is_damaged_is_a_frame_error_in_both_builds(metrics: bool) -> None:
    """Mid-chunk, where nothing else would notice: both readers skip the unknown section (pyamqp too), so the
    event has no sequence number; wrapping it raises the retriable FrameError instead of handing it on."""
    from azure.eventhub._pyamqp._decode import decode_frame, decode_payload

    from rxhubs.testing._fault_corrupt import damage
    from rxhubs.transport import _framing_py
    from rxhubs.transport._frame_errors import FrameError

    first, middle, last = _frames_of(emulator_frames(64, metrics=metrics, count=3))
    broken = damage(middle, "section")
    assert broken is not None and broken != middle
    pyamqp = decode_payload(decode_frame(memoryview(broken)[8:])[1][-1])
    assert pyamqp.message_annotations is None  # the SDK's decoder drops it too
    for reader in (_framing_py, compiled_reader()):
        assert reader is not None
        messages, consumed, other, _ = reader.parse(first + broken + last, 1, 0)
        assert consumed == len(first + broken + last)
        assert len(messages) == 3 and other is None and messages[1].message_annotations is None
        for wrap in (event_wrapper(), _events_py.received_messages):
            with pytest.raises(FrameError, match="no sequence number") as caught:
                wrap(messages)
            assert caught.value.retriable
            assert [e.sequence_number for e in wrap([messages[0], messages[2]])] == [1000000, 1000002]
