"""The write task's grouping of Arrow rows (rxhubs.spark._write_rows) against a row-by-row reference."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs.errors import ConfigurationError
from rxhubs.spark._write_rows import groups, properties_of, shared_properties

MAP = pa.map_(pa.string(), pa.string())
PAIRS = st.lists(st.tuples(st.sampled_from(["type", "unit", "n"]), st.sampled_from(["a", "b", ""])), max_size=3,
                 unique_by=lambda kv: kv[0])
ROWS = st.lists(
    st.tuples(st.binary(max_size=8), st.one_of(st.none(), st.sampled_from(["0", "1", "2", "10"])),
              st.one_of(st.none(), PAIRS)),
    min_size=1, max_size=40,
)


Grouped = dict[Any, list[tuple[int, bytes, dict[str, str]]]]


def reference(rows: list[tuple[bytes, str | None, Any]], first: int) -> Grouped:
    out: Grouped = {}
    for i, (body, target, props) in enumerate(rows):
        out.setdefault(target, []).append((first + i, body, dict(props or [])))
    return out


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, same=st.booleans(), cut=st.integers(0, 5), by_key=st.booleans())
def test_groups_match_the_rows_one_by_one(rows: list[Any], same: bool, cut: int, by_key: bool) -> None:
    if same:  # every row the same map: the column-wise path
        rows = [(b, t, rows[0][2]) for b, t, _ in rows]
    column = "partitionKey" if by_key else "partitionId"
    full = pa.record_batch({
        "body": pa.array([b"pad"] * cut + [r[0] for r in rows], pa.binary()),
        column: pa.array([None] * cut + [r[1] for r in rows], pa.string()),
        "properties": pa.array([[("x", "y")]] * cut + [r[2] for r in rows], MAP),
    })
    batch = full.slice(cut)  # a slice: the map's keys and items belong to the parent
    columns = ("body", None, column, True) if by_key else ("body", column, None, True)
    got = groups(batch, columns, 100, 0)
    expected = reference(rows, 100)
    assert list(got) == [((None, t) if by_key else (t, None)) for t in expected]  # groups by first row
    for (pid, key), (positions, events) in got.items():
        want = expected[key if by_key else pid]
        assert [int(p) for p in positions] == [w[0] for w in want]
        assert [(e.body, dict(e.properties)) for e in events] == [(w[1], w[2]) for w in want]


def test_no_target_column_is_one_group_and_a_string_body_is_sent_as_its_utf8() -> None:
    batch = pa.record_batch({"body": pa.array(["é", "b"])})
    [(target, (positions, events))] = groups(batch, ("body", None, None, False), 7, 0).items()
    assert target == (None, None) and list(positions) == [7, 8]
    assert [e.body for e in events] == ["é".encode(), b"b"] and events[0].properties == {}


def test_a_null_body_names_its_row() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", None])})
    with pytest.raises(ConfigurationError, match="row 6 of write task 3: body is null"):
        groups(batch, ("body", None, None, False), 5, 3)


def test_equal_maps_share_one_dict_and_differing_maps_are_seen() -> None:
    same = pa.array([[("k", "v"), ("u", "C")]] * 3, MAP)
    assert shared_properties(same) == {"k": "v", "u": "C"}
    assert shared_properties(pa.array([[("k", "v")], [("k", "w")]], MAP)) is None
    assert shared_properties(pa.array([[("k", "v")], [("j", "v")]], MAP)) is None
    assert shared_properties(pa.array([[("k", "v")], [("k", "v"), ("k", "v")]], MAP)) is None
    assert shared_properties(pa.array([[("k", "v")], None], MAP)) is None
    rows = properties_of(pa.array([[("k", "v")], [("j", "w")], [("k", "v")]], MAP))
    assert isinstance(rows, list) and rows[0] is rows[2] and rows[1] == {"j": "w"}
