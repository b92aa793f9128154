"""Arrays of elements of no width (null, true, false, uint0, ulong0, list0): a count that bytes do not bound.

An AMQP array's elements share one constructor; for these six constructors an element takes no byte at all, so a
ten-byte array32 can claim 4,294,967,295 elements. pyamqp's decoder (and ours, before) built a list that long:
the full suite's fuzz met one in the Spark source's slow path and the kernel killed the worker at 21 GB. Both
readers (the receive path's and the Spark source's Arrow builder), in both builds, refuse an array of more than
255 such elements than the bytes left in its frame could hold one byte each, with :class:`FrameError` (the
partition's retriable error: nothing is decoded, nothing grows); a bounded one still decodes as pyamqp decodes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from azure.eventhub._pyamqp._decode import decode_payload
from azure.eventhub._pyamqp.message import Message

from rxhubs.spark._arrow_batch import record_batch, slow_row
from rxhubs.transport._frame_errors import FrameError
from tests.transport.test_frames import CHANNEL, HANDLE, transfer

ZERO_WIDTH = (0x40, 0x41, 0x42, 0x43, 0x44, 0x45)
#: Far more than the frame holds, and little enough that a reader without the check decodes it (160 MB, seconds)
#: and the test fails on the missing error instead of the kernel killing it (as 0xFFFFFFFF does: 21 GB).
COUNT = 20_000_000


def _payload(element: int, count: int, body: bytes, section: int = 0x74) -> bytes:
    """Annotations as the service sends them, then ``a`` an array32 of ``count`` elements: an application property
    (section 0x74), or a footer entry (0x78: a section the Arrow builder's fast path steps over, not decodes)."""
    seq = b"\xa3\x15x-opt-sequence-number\x81" + (7).to_bytes(8, "big")
    offset = b"\xa3\x0cx-opt-offset\xa1\x017"
    annotations = b"\x00\x53\x72\xc1" + bytes([len(seq) + len(offset) + 1, 4]) + seq + offset
    array = b"\xf0" + (5).to_bytes(4, "big") + count.to_bytes(4, "big") + bytes([element])
    entries = b"\xa1\x01a" + array
    mapped = b"\x00\x53" + bytes([section]) + b"\xd1" + (4 + len(entries)).to_bytes(4, "big") + (2).to_bytes(4, "big")
    data = b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body
    return annotations + mapped + entries + data if section == 0x74 else annotations + data + mapped + entries


def _frame(payload: bytes) -> bytes:
    """A single-frame transfer of our link carrying ``payload`` (pyamqp's performative, our payload bytes)."""
    good = transfer(Message(data=[b""]), 3)
    marker = bytes(transfer(Message(data=[b""]), 3)).index(b"\x00\x53\x75")
    body = good[8:marker] + payload
    return (8 + len(body)).to_bytes(4, "big") + good[4:8] + body


@pytest.fixture(params=["python", "compiled"], scope="module")
def framing(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.transport._framing_" + ("c" if request.param == "compiled" else "py"))
    assert str(module.__file__).endswith(".so") == (request.param == "compiled"), module.__file__
    return module


@pytest.fixture(params=["python", "compiled"], scope="module")
def arrow(request: pytest.FixtureRequest) -> ModuleType:
    module = importlib.import_module("rxhubs.spark._arrow_frames_" + ("c" if request.param == "compiled" else "py"))
    assert str(module.__file__).endswith(".so") == (request.param == "compiled"), module.__file__
    return module


@pytest.mark.parametrize("section", [0x74, 0x78], ids=["application-properties", "footer"])
@pytest.mark.parametrize("element", ZERO_WIDTH)
def test_a_count_no_bytes_bound_is_refused_by_the_receive_reader(framing: ModuleType, element: int, section: int
                                                                 ) -> None:
    raw = _frame(_payload(element, COUNT, b"x" * 64, section))
    with pytest.raises(FrameError, match=f"{COUNT} elements"):
        framing.parse(raw, CHANNEL, HANDLE)


@pytest.mark.parametrize("section", [0x74, 0x78], ids=["application-properties", "footer"])
@pytest.mark.parametrize("element", ZERO_WIDTH)
def test_a_count_no_bytes_bound_is_refused_by_the_arrow_builder(arrow: ModuleType, element: int, section: int
                                                                ) -> None:
    raw = _frame(_payload(element, COUNT, b"x" * 64, section))
    columns = arrow.FrameColumns(slow_row)
    with pytest.raises(FrameError, match=f"{COUNT} elements"):
        columns.parse(raw, CHANNEL, HANDLE)
    assert columns.rows == 0


def test_a_bounded_array_of_nulls_still_reads_as_pyamqp_reads_it(framing: ModuleType, arrow: ModuleType) -> None:
    payload = _payload(0x40, 300, b"x" * 400)  # 300 nulls, 400 bytes left in the frame: bounded
    want = decode_payload(memoryview(payload))
    assert want.application_properties == {b"a": [None] * 300}
    raw = _frame(payload)
    messages, consumed, other, _ = framing.parse(raw, CHANNEL, HANDLE)
    assert (len(messages), consumed, other) == (1, len(raw), None)
    assert messages[0].application_properties == want.application_properties and messages[0].data == want.data
    columns = arrow.FrameColumns(slow_row)  # a list is no map value the fast path writes: the slow path's row
    assert columns.parse(_frame(payload), CHANNEL, HANDLE)[0] == 1
    batch = record_batch(columns.take(), "0", "$Default", "hub")
    assert batch.column("body").to_pylist() == [b"x" * 400] and batch.column("sequenceNumber").to_pylist() == [7]
