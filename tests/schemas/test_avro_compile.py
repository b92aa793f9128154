"""The readers made per schema against fastavro: the same values, and never a value fastavro would not give.

Schemas are generated (records, enums, fixed, arrays, maps, unions, every primitive, nested), values for them by
``fastavro.utils.generate_many``, bodies by fastavro's writer; then bodies are corrupted (bytes flipped, cut,
added). A compiled reader must give fastavro's value for every good body, and for a corrupted one either
MISSING or exactly what fastavro reads from that body alone (ending at its end). ``AvroSchemas.decode_values``
must then equal decoding each event alone.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import random
import re
from typing import Any

import fastavro
import pytest
from fastavro.utils import generate_many
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs._models import Event
from rxhubs.schemas import AvroSchemas, UndecodableError
from rxhubs.schemas._avro_compile import MISSING, compile_reader

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
_names = itertools.count()


def _named(kind: str) -> str:
    return f"{kind}{next(_names)}"


def _zero_width(schema: Any) -> bool:
    """Values of this schema can take no bytes: an array of them with a corrupted count makes fastavro itself loop
    for as long as the count says (hours), so arrays of them are not generated."""
    if schema == "null":
        return True
    if isinstance(schema, dict) and schema["type"] == "record":
        return all(_zero_width(f["type"]) for f in schema["fields"])
    return isinstance(schema, dict) and schema["type"] == "fixed" and schema["size"] == 0


def schemas(depth: int = 3) -> st.SearchStrategy[Any]:
    """Avro schemas nested at most ``depth`` deep (fastavro's generated containers hold 10 items each)."""
    leaves = st.one_of(
        st.sampled_from(PRIMITIVES),
        st.builds(lambda n: {"type": "enum", "name": _named("E"), "symbols": [f"S{i}" for i in range(n)]},
                  st.integers(1, 5)),
        st.builds(lambda n: {"type": "fixed", "name": _named("F"), "size": n}, st.integers(0, 9)))
    if depth == 0:
        return leaves
    children = st.deferred(lambda: schemas(depth - 1))
    return st.one_of(
        leaves,
        st.builds(lambda t: {"type": "array", "items": t}, children.filter(lambda t: not _zero_width(t))),
        st.builds(lambda t: {"type": "map", "values": t}, children),
        st.builds(lambda t: ["null", t], children.filter(lambda t: t != "null" and not isinstance(t, list))),
        st.builds(lambda ts: {"type": "record", "name": _named("R"),
                              "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(ts)]},
                  st.lists(children, min_size=0, max_size=5)))


def _body(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, value)
    return out.getvalue()


def _alone(schema: Any, body: bytes) -> Any:
    """fastavro's value of one body, or MISSING when it fails or leaves bytes over."""
    stream = io.BytesIO(body)
    try:
        value = fastavro.schemaless_reader(stream, schema)
    except Exception:
        return MISSING
    return value if stream.tell() == len(body) else MISSING


def _same(a: Any, b: Any) -> bool:
    return repr(a) == repr(b) and type(a) is type(b)  # True is not 1, 1.0 is not 1, nan is nan


def _corrupt(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    kind = rng.randrange(4)
    if kind == 0 and data:
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1 and data:
        del data[rng.randrange(len(data)):]
    elif kind == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
    else:
        data = bytearray(rng.randrange(256) for _ in range(rng.randrange(0, 12)))
    return bytes(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.integers(0, 2**32 - 1))
def test_a_compiled_reader_gives_fastavros_values_and_misses_what_it_cannot_read_exactly(raw: Any, seed: int) -> None:
    schema = fastavro.parse_schema(raw)
    reader = compile_reader(schema)
    assert reader is not None, raw  # everything generated here is compiled
    random.seed(seed)
    values = list(generate_many(schema, 8))
    bodies = [_body(schema, v) for v in values]
    got = reader(b"".join(bodies), list(itertools.accumulate(map(len, bodies))))
    assert all(_same(g, _alone(schema, b)) for g, b in zip(got, bodies, strict=True)), repr((raw, values, got))[:800]
    rng = random.Random(seed)
    bad = [_corrupt(rng, b) if rng.random() < 0.6 else b for b in bodies]
    got = reader(b"".join(bad), list(itertools.accumulate(map(len, bad))))
    for value, body in zip(got, bad, strict=True):
        assert value is MISSING or _same(value, _alone(schema, body)), repr((raw, body, value))[:800]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.integers(0, 2**32 - 1), st.booleans())
def test_decode_values_equals_decoding_each_event_alone(raw: Any, seed: int, compiled: bool) -> None:
    schema = fastavro.parse_schema(raw)
    schemas_ = AvroSchemas(client=None)
    schemas_._parsed.update(a=schema, b=fastavro.parse_schema("long"))
    if not compiled:  # the fastavro path (schemas the compiler leaves alone) must hold the same contract
        schemas_._readers["a"] = None
    random.seed(seed)
    rng = random.Random(seed)
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    events = []
    for i, value in enumerate(generate_many(schema, 12)):
        kind = rng.choice(["avro/binary+a", "avro/binary+a", "avro/binary+b", "avro/binary+zz", None, "text/plain"])
        body = _body(schema, value) if kind != "avro/binary+b" else _body(schemas_._parsed["b"], i)
        if rng.random() < 0.4:
            body = _corrupt(rng, body)
        events.append(Event._unchecked(body, i, str(i), when, None, {}, {"content-type": kind}))
    values, failed = schemas_.decode_values(events)
    expected: list[Any] = []
    reasons: list[tuple[int, str]] = []
    for i, event in enumerate(events):
        try:
            expected.append(schemas_.decode_event(event))
        except UndecodableError as exc:
            expected.append(None)
            reasons.append((i, _unaddressed(str(exc))))
    assert all(_same(a, b) for a, b in zip(values, expected, strict=True)), repr((raw, values, expected))[:800]
    assert [(i, _unaddressed(str(e))) for i, e in failed] == reasons


def _unaddressed(reason: str) -> str:
    """A reason without the object addresses fastavro's messages carry (``<_io.BytesIO object at 0x7f...>``)."""
    return re.sub(r" at 0x[0-9a-f]+", "", reason)


def test_a_body_cut_short_does_not_take_the_next_body_with_it() -> None:
    schema = fastavro.parse_schema(json.loads('{"type": "record", "name": "R", "fields": ['
                                              '{"name": "s", "type": "string"}, {"name": "n", "type": "long"}]}'))
    good = _body(schema, {"s": "abc", "n": 5})
    cut = good[:-1]  # its read strays into the next body's bytes
    for reader_made in (True, False):
        schemas_ = AvroSchemas(client=None)
        schemas_._parsed["a"] = schema
        if not reader_made:
            schemas_._readers["a"] = None
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        events = [Event._unchecked(b, i, str(i), when, None, {}, {"content-type": "avro/binary+a"})
                  for i, b in enumerate([good, cut, good, good + b"\x00"])]
        values, failed = schemas_.decode_values(events)
        assert values == [{"s": "abc", "n": 5}, None, {"s": "abc", "n": 5}, None]
        assert [i for i, _ in failed] == [1, 3]
        assert "1 bytes left over" in str(failed[1][1])


def test_schemas_with_logical_types_or_recursion_are_left_to_fastavro() -> None:
    assert compile_reader(fastavro.parse_schema({"type": "long", "logicalType": "timestamp-millis"})) is None
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    assert compile_reader(fastavro.parse_schema(linked)) is None
    names = {"type": "record", "name": "R", "fields": [{"name": "x'); import os; ('", "type": "long"}]}
    reader = compile_reader(fastavro.parse_schema(names))  # a field name is data, never code
    assert reader is not None and reader(b"\x02", [1]) == [{"x'); import os; ('": 1}]


def _zigzag(n: int) -> bytes:
    x, out = (n << 1) ^ (n >> 63), bytearray()
    while x > 127:
        out.append(x & 127 | 128)
        x >>= 7
    return bytes(out + bytes([x]))


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "fixed", "name": "F3", "size": 3}},
    {"type": "array", "items": "string"},
    {"type": "map", "values": "null"},
])
def test_a_corrupt_block_count_is_refused_not_looped(schema: Any) -> None:
    """A count of 2**62 items in a 9-byte body: refused at once (slices past the end never raise; without the
    guard this loops for years and the suite's per-test timeout fails it)."""
    reader = compile_reader(fastavro.parse_schema(schema))
    assert reader is not None
    body = _zigzag(2**62) + b"abcdefgh"
    assert reader(body, [len(body)]) == [MISSING]
