"""The builder-cost script (``python -m rxhubs.bench._builder_cost``) parses what it says, on both builds."""

from __future__ import annotations

import pytest

from rxhubs.bench import _builder_cost as cost
from rxhubs.spark._arrow_batch import compiled_builder


@pytest.fixture(scope="module")
def chunk() -> bytes:
    return cost.frames()


@pytest.mark.parametrize("compiled", [False, True])
def test_every_frame_of_the_chunk_becomes_a_row(chunk: bytes, compiled: bool) -> None:
    if compiled and compiled_builder() is None:
        pytest.skip("no compiled builder (RXHUBS_NO_EXTENSIONS or no compiler): the Python case covers the script")
    assert cost.parse_rounds(cost.builder(compiled), chunk, 2) == 2 * cost.CHUNK


def test_a_frame_handed_back_is_refused(chunk: bytes) -> None:
    # a frame on another channel is handed back by the builder: the measure must not count a short parse
    other = chunk[:6] + b"\x00\x09" + chunk[8:]
    with pytest.raises(RuntimeError, match="handed a frame back"):
        cost.parse_rounds(cost.builder(False), other, 1)
