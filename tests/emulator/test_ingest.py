"""The emulator's fast ingest of plain batches stores the same bytes as the general path, and refuses the same input;
batches azure-eventhub's encoder makes (the bytes the native send path writes) are stored alike and read back by
pyamqp's decoder with their bodies, properties, keys and sequence numbers.

Broken on purpose to see these fail: the key pair left out of a keyed batch (stamp_run), ``_plain`` accepting a
vbin8 data section shorter than the message, the vbin32 fast check not comparing the inner section's size, the
sequence number stamped one too high (each failed).
"""

from __future__ import annotations

import struct
from typing import Any
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rxhubs.emulator import _hubs
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import DecodeError, Symbol
from rxhubs.emulator._encode import encode_value
from rxhubs.emulator._hubs import Partition
from rxhubs.emulator._ingest import _DURABLE, RECORD, split_plain

_I = struct.Struct(">I")


def _data(body: bytes, wide: bool) -> bytes:
    if wide or len(body) > 255:
        return b"\x00\x53\x75\xb0" + _I.pack(len(body)) + body
    return b"\x00\x53\x75\xa0" + bytes((len(body),)) + body


def _batch(messages: list[bytes], key: str | None, header: bool) -> bytes:
    """A batch message; a keyed one's events each start with the durable header and the key, as pyamqp writes."""
    outer = b"\x00\x53\x70\xc0\x02\x01\x41" if header else b""
    prefix = b""
    if key is not None:
        annotation = b"\x00\x53\x72" + encode_value({Symbol("x-opt-partition-key"): key})
        outer += annotation
        prefix = _DURABLE + annotation
    return outer + b"".join(b"\x00\x53\x75\xb0" + _I.pack(len(prefix + m)) + prefix + m for m in messages)


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
            ann, inner, prefix = split
            assert inner == messages and msg.partition_key_of(ann) == key
            if inner:
                assert fast.append_plain(inner, key, prefix)
            _general(payload, general)
    assert _stored(fast) == _stored(general)
    assert fast.times == general.times and fast.own_da == general.own_da == []


def test_same_bytes_with_properties_keys_and_growing_offsets() -> None:
    messages = [_data(b"a" * 10, False), b"\x00\x53\x74" + encode_value({"k": 1}) + _data(b"b" * 400, True)]
    for key in (None, "device-7", "k" * 300):
        fast, general = Partition("h", "0", None), Partition("h", "0", None)
        with mock.patch.object(_hubs, "now_ms", lambda: 1_700_000_000_000):
            for _ in range(40):  # offsets grow across appends (and change width)
                _, inner, prefix = split_plain(_batch(messages, key, False)) or ({}, [], b"")
                assert inner == messages
                assert fast.append_plain(inner, key, prefix)
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


# -- against azure-eventhub's own encoder and decoder ----------------------------------------------------------

_sdk_values = (
    st.none() | st.booleans() | st.integers(-(2**31), 2**31 - 1) | st.text(max_size=40) | st.binary(max_size=40)
)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(st.tuples(st.binary(min_size=256, max_size=700) | st.binary(max_size=40),
                              st.dictionaries(st.text(max_size=10), _sdk_values, max_size=3)), min_size=1, max_size=10),
    key=st.none() | st.text(min_size=1, max_size=20),
)
@example(events=[(b"x" * 512, {}), (b"y" * 300, {"n": 1})], key=None)
def test_batches_pyamqp_encodes_are_stored_alike_and_read_back_by_pyamqp(events: list[Any], key: str | None) -> None:
    """What azure-eventhub's ``EventDataBatch`` sends (the native send path writes the same bytes): both ingest
    paths store the same frames, and pyamqp's decoder reads every stored event back with its body and properties
    (events of 256 bytes or more, keyed or not, take the fast path)."""
    from azure.eventhub import EventData, EventDataBatch
    from azure.eventhub._pyamqp._decode import decode_payload
    from azure.eventhub._pyamqp._encode import encode_payload

    from rxhubs.emulator._delivery import message_of

    batch = EventDataBatch(partition_key=key)
    for body, props in events:
        data = EventData(body)
        if props:
            data.properties = props
        batch.add(data)
    payload = bytes(encode_payload(bytearray(), batch._message))
    split = split_plain(payload)
    if all(len(body) >= 256 for body, _ in events):
        assert split is not None  # (the bench's events, keyed or not: the fast path is taken)
    fast, general = Partition("h", "0", None), Partition("h", "0", None)
    with mock.patch.object(_hubs, "now_ms", lambda: 1_700_000_000_000):
        if split is not None:
            assert fast.append_plain(split[1], msg.partition_key_of(split[0]), split[2])
        else:
            _general(payload, fast)
        _general(payload, general)
    assert _stored(fast) == _stored(general)
    for n, ((body, props), head, stored) in enumerate(zip(events, fast.heads, fast.bodies, strict=True)):
        message = decode_payload(memoryview(message_of(head, stored)))
        assert b"".join(message.data) == body
        as_read = {k.encode(): v.encode() if isinstance(v, str) else v for k, v in props.items()}  # (pyamqp: bytes)
        assert (message.application_properties or {}) == as_read
        annotations = message.message_annotations
        assert annotations[b"x-opt-sequence-number"] == n
        assert annotations.get(b"x-opt-partition-key") == (None if key is None else key.encode())
