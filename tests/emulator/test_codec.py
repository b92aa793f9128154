"""The emulator's AMQP codec and message handling, checked against the SDK's own encoder and decoder."""

from __future__ import annotations

import uuid

import pytest
from azure.eventhub._pyamqp._decode import decode_payload
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.message import Header, Message, Properties
from hypothesis import given
from hypothesis import strategies as st

from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import (
    Array,
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    UInt,
    ULong,
    decode_value,
    encode_value,
    skip_value,
)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=40), st.binary(max_size=40),
    st.floats(allow_nan=False), st.uuids(), st.builds(Symbol, st.from_regex(r"[a-z:\-]{0,20}", fullmatch=True)),
    st.builds(Timestamp, st.integers(0, 2**62)), st.builds(UInt, st.integers(0, 2**32 - 1)),
    st.builds(ULong, st.integers(0, 2**64 - 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=10), st.builds(Symbol, st.from_regex(r"[a-z]{1,8}",
                                                                                       fullmatch=True))),
                        inner, max_size=5),
        st.builds(Described, st.builds(ULong, st.integers(0, 300)), inner),
    ),
    max_leaves=20,
)


@given(values)
def test_round_trip(value: object) -> None:
    encoded = encode_value(value)
    decoded, end = decode_value(encoded, 0, len(encoded))
    assert end == len(encoded) == skip_value(encoded, 0, len(encoded))
    assert decoded == value


@given(st.binary(max_size=64))
def test_decoding_garbage_raises_decode_error_only(blob: bytes) -> None:
    try:
        decode_value(blob, 0, len(blob))
    except DecodeError:
        pass


@pytest.mark.parametrize("blob", [b"\xb0\xff\xff\xff\xff", b"\xd0\x00\x00\x00\x10\xff\xff\xff\xff",
                                  b"\xf0\x00\x00\x00\x08\x7f\xff\xff\xff\x40", b"\x00" * 100])
def test_lengths_and_counts_are_never_trusted(blob: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_value(blob, 0, len(blob))


def test_symbol_array_reads_in_the_sdk() -> None:
    from azure.eventhub._pyamqp._decode import _DECODE_BY_CONSTRUCTOR

    encoded = encode_value(Array(0xA3, [Symbol("a"), Symbol("bc")]))
    _, items = _DECODE_BY_CONSTRUCTOR[encoded[0]](memoryview(encoded)[1:])
    assert items == [b"a", b"bc"]


def _sdk_message(**parts: object) -> bytes:
    out = bytearray()
    encode_payload(out, Message(**parts))  # type: ignore[arg-type]
    return bytes(out)


def test_stamp_keeps_the_clients_sections_and_adds_event_hubs_annotations() -> None:
    raw = _sdk_message(
        header=Header(durable=True),
        delivery_annotations={b"hop": 1},
        message_annotations={b"custom": "kept", b"x-opt-sequence-number": 99},
        properties=Properties(message_id=str(uuid.uuid4()), content_type="application/json"),
        application_properties={"app": "yes"},
        data=[b"payload"],
    )
    prepared = msg.prepare(raw)
    stored, da_pos = msg.stamp(prepared, 7, 1234, 1_700_000_000_000, "key-1")
    decoded = decode_payload(memoryview(stored))
    ann = decoded.message_annotations
    assert ann[b"x-opt-sequence-number"] == 7
    assert ann[b"x-opt-offset"] == b"1234"
    assert ann[b"x-opt-enqueued-time"] == 1_700_000_000_000
    assert ann[b"custom"] == b"kept"
    assert ann[b"x-opt-partition-key"] == b"key-1"
    assert decoded.delivery_annotations == {b"hop": 1}  # kept, as the service keeps them
    assert decoded.header.durable is True
    assert decoded.properties.content_type == b"application/json"
    assert decoded.application_properties == {b"app": b"yes"}
    assert decoded.data == [b"payload"]
    metrics = msg.runtime_metrics(7, 1234, 1_700_000_000_000, 1_700_000_000_500)
    with_metrics = decode_payload(memoryview(msg.with_delivery_annotations(stored, da_pos, metrics)))
    assert with_metrics.delivery_annotations[b"last_enqueued_sequence_number"] == 7
    assert with_metrics.delivery_annotations[b"hop"] == 1  # one section: the sender's map and the metrics
    assert with_metrics.data == [b"payload"]
    assert with_metrics.message_annotations[b"custom"] == b"kept"


def test_runtime_metrics_are_added_to_messages_without_delivery_annotations_and_win_over_same_keys() -> None:
    plain = msg.prepare(_sdk_message(data=[b"p"]))
    stored, da_pos = msg.stamp(plain, 1, 10, 5, None)
    metrics = msg.runtime_metrics(1, 10, 5, 6)
    assert decode_payload(memoryview(msg.with_delivery_annotations(stored, da_pos, metrics))
                          ).delivery_annotations[b"last_enqueued_offset"] == b"10"
    clash = msg.prepare(_sdk_message(delivery_annotations={b"last_enqueued_sequence_number": -5, b"mine": b"x" * 300},
                                     data=[b"p"]))
    stored, da_pos = msg.stamp(clash, 3, 10, 5, None)
    merged = decode_payload(memoryview(msg.with_delivery_annotations(stored, da_pos, metrics))).delivery_annotations
    assert merged[b"last_enqueued_sequence_number"] == 1 and merged[b"mine"] == b"x" * 300
    assert len(merged) == 5


def test_sections_out_of_spec_order_are_kept() -> None:
    data = b"\x00\x53\x75" + encode_value(b"body")
    ann = b"\x00\x53\x72" + encode_value({Symbol("k"): "v"})
    prepared = msg.prepare(data + ann + data)
    assert prepared.rest == data + data
    assert prepared.annotations == {Symbol("k"): "v"}


@pytest.mark.parametrize("blob", [b"", b"\x00\x53", b"\x00\x53\x75\xa0\x05ab", b"\x00\x53\x99\x40",
                                  b"\x01\x02\x03"])
def test_malformed_messages_are_refused(blob: bytes) -> None:
    with pytest.raises(DecodeError):
        msg.prepare(blob)
