"""The bytes of saved operator state: large states round trip whichever way they were compressed."""

from __future__ import annotations

import base64
import json
import random

import pytest

from rxhubs.errors import StateError
from rxhubs.state._codec import OperatorState, decode, encode


def _state(values: dict[str, object]) -> dict[str, OperatorState]:
    return {"w": OperatorState("f1", values, {"t": 5, "wm": 4, "seq": 9, "late": 0})}


def test_a_large_state_of_barely_compressible_values_round_trips_and_is_still_compressed() -> None:
    rng = random.Random(3)  # base64 of random bytes: the run-length path (a sample shrinks by < 1/3)
    values = {json.dumps([f"key-{n}", n]): base64.b64encode(rng.randbytes(600)).decode() for n in range(400)}
    text_size = len(json.dumps(values, separators=(",", ":")))
    data = encode(_state(values))
    assert decode(data) == _state(values)
    assert text_size > 256 * 1024 and len(data) < text_size * 0.85


def test_a_large_state_of_counts_round_trips_compressed_several_times() -> None:
    values = {json.dumps([f"dev-{n}", 1_767_225_600_000_000]): n % 97 for n in range(20_000)}
    data = encode(_state(values))
    assert decode(data) == _state(values)
    assert len(data) * 3 < len(json.dumps(values, separators=(",", ":")))


def test_a_flipped_byte_in_a_large_state_is_a_checksum_error() -> None:
    rng = random.Random(4)
    values = {str(n): rng.randbytes(300).hex() for n in range(1000)}
    data = bytearray(encode(_state(values)))
    data[len(data) // 2] ^= 0x01
    with pytest.raises(StateError, match="checksum"):
        decode(bytes(data))
