"""The emulator's fast ingest of plain batches stores the same bytes as the general path, and refuses the same input.

Broken on purpose to see these fail: the key pair left out of a keyed batch (stamp_run), ``_plain`` accepting a
vbin8 data section shorter than the message, the vbin32 fast check not comparing the inner section's size.
"""

from __future__ import annotations

import struct
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs.emulator import _hubs
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import DecodeError, Symbol
from rxhubs.emulator._encode import encode_value
from rxhubs.emulator._hubs import Partition
from rxhubs.emulator._ingest import RECORD, split_plain

_I = struct.Struct(">I")


def _data(body: bytes, wide: bool) -> bytes:
    if wide or len(body) > 255:
        return b"\x00\x53\x75\xb0" + _I.pack(len(body)) + body
    return b"\x00\x53\x75\xa0" + bytes((len(body),)) + body


def _batch(messages: list[bytes], key: str | None, header: bool) -> bytes:
    outer = b"\x00\x53\x70\xc0\x02\x01\x41" if header else b""
    if key is not None:
        outer += b"\x00\x53\x72" + encode_value({Symbol("x-opt-partition-key"): key})
    return outer + b"".join(b"\x00\x53\x75\xb0" + _I.pack(len(m)) + m for m in messages)


plain_messages = st.lists(
    st.tuples(
        st.binary(max_size=300), st.booleans(),
        st.none() | st.dictionaries(st.text(max_size=8), st.integers(-5, 5) | st.text(max_size=5), max_size=3),
    ).map(lambda t: (b"\x00\x53\x74" + encode_value(t[2]) if t[2] is not None else b"") + _data(t[0], t[1])),
    max_size=12,
)


def _stored(partition: Partition) -> tuple[list[int], list[bytes], list[bytes], int, int, int]:
    return (partition.offsets, partition.heads, partition.bodies, partition.next_offset, partition.largest_frame,
            partition.next_sequence_number)


def _general(payload: bytes, partition: Partition) -> None:
    ann, inner = msg.split_batch(payload)
    if inner:
        partition.append([msg.prepare(m) for m in inner], msg.partition_key_of(ann))


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.tuples(plain_messages, st.none() | st.text(max_size=300), st.booleans()), max_size=4))
def test_plain_batches_are_stored_as_the_general_path_stores_them(batches: list[Any]) -> None:
    fast, general = Partition("h", "0", None), Partition("h", "0", None)
    with mock.patch.object(_hubs, "now_ms", lambda: 1_700_000_000_000):  # one instant for both
        for messages, key, header in batches:
            payload = _batch(messages, key, header)
            split = split_plain(payload)
            if not payload:
                assert split is None  # the general path refuses an empty message
                continue
            assert split is not None
            ann, inner = split
            assert inner == messages and msg.partition_key_of(ann) == key
            if inner:
                assert fast.append_plain(inner, key)
            _general(payload, general)
    assert _stored(fast) == _stored(general)
    assert fast.times == general.times and fast.own_da == general.own_da == []


def test_same_bytes_with_properties_keys_and_growing_offsets() -> None:
    messages = [_data(b"a" * 10, False), b"\x00\x53\x74" + encode_value({"k": 1}) + _data(b"b" * 400, True)]
    for key in (None, "device-7", "k" * 300):
        fast, general = Partition("h", "0", None), Partition("h", "0", None)
        with mock.patch.object(_hubs, "now_ms", lambda: 1_700_000_000_000):
            for _ in range(40):  # offsets grow across appends (and change width)
                assert fast.append_plain(messages, key)
                _general(_batch(messages, key, False), general)
        assert _stored(fast) == _stored(general)
        assert len(str(fast.offsets[-1])) > len(str(fast.offsets[0]))


def test_record_size_is_the_logs() -> None:
    assert _hubs._REC.size == RECORD


@settings(max_examples=500, deadline=None)
@given(messages=plain_messages.filter(bool), cut=st.integers(1, 40), junk=st.binary(min_size=1, max_size=12))
def test_damaged_batches_are_never_plain(messages: list[bytes], cut: int, junk: bytes) -> None:
    """A payload the general path refuses or reads differently is not split by the fast one."""
    payload = _batch(messages, None, False)
    for damaged in (payload[:-cut], payload + junk, payload[:8] + junk + payload[8:]):
        split = split_plain(damaged)
        if split is None:
            continue
        _, inner = msg.split_batch(damaged)  # the fast path accepted it: the general one reads the same
        assert split[1] == inner
        for m in inner:
            prepared = msg.prepare(m)
            assert prepared.rest == m and not prepared.head and not prepared.annotations and not prepared.delivery


def test_not_plain_takes_the_general_path() -> None:
    annotated = b"\x00\x53\x72" + encode_value({Symbol("x-opt-custom"): 1}) + _data(b"x", False)
    assert split_plain(_batch([annotated], None, False)) is None
    props = b"\x00\x53\x74" + encode_value({"k": 1})
    for bad in (
        _data(b"abc", True)[:-1], _data(b"abc", False)[:-1], _data(b"abc", False) + b"\x00",
        _data(b"abc", True) + b"\x00\x53", props + _data(b"abc", False) + b"\x40", props[:-1] + _data(b"a", False),
    ):
        assert split_plain(_batch([bad], None, False)) is None, bad
        try:
            msg.prepare(bad)
        except DecodeError:
            pass
        else:
            raise AssertionError(f"the general path accepted {bad!r}")
