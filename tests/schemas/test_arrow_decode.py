"""ArrowDecoder (what ``with_decoded`` runs per Arrow batch): grouped per schema, bad rows null with a reason.

The registry here is a stand-in with two Avro schemas and a JSON schema (the Spark test uses the emulator's real
registry); what is checked is the batch logic: one reader call per schema per batch, an unknown id fetched once
however many rows carry it, and rows that do not decode or do not fit the column's type nulled with a reason
while the rest of the batch decodes.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa

from rxhubs.schemas import AvroSchemas, JsonSchemas
from rxhubs.schemas._arrow_decode import ArrowDecoder
from rxhubs.schemas._spark import arrow_type_of

READER = {"type": "record", "name": "Reading", "fields": [{"name": "device", "type": "string"},
                                                            {"name": "t", "type": "double"}]}
V2 = {"type": "record", "name": "Reading", "fields": [{"name": "device", "type": "string"},
                                                        {"name": "t", "type": "double"},
                                                        {"name": "site", "type": "string"}]}
MISFIT = {"type": "record", "name": "Reading", "fields": [{"name": "device", "type": "string"},
                                                            {"name": "t", "type": "string"}]}
SCHEMAS = {"v1": READER, "v2": V2, "misfit": MISFIT, "j": {"type": "object"}}


class Registry:
    """Schemas by id, as ``SchemaRegistryClient.get_schema`` gives them; counts the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_schema(self, schema_id: str) -> Any:
        self.calls.append(schema_id)
        if schema_id not in SCHEMAS:
            raise LookupError(f"no schema {schema_id}")
        return type("Schema", (), {"definition": json.dumps(SCHEMAS[schema_id])})()


def _avro(schema_id: str, value: Any) -> tuple[bytes, str]:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMAS[schema_id]), value)
    return out.getvalue(), f"avro/binary+{schema_id}"


def _columns(rows: list[tuple[bytes, str | None]]) -> tuple[Any, Any]:
    props = [[("content-type", kind)] if kind is not None else [] for _, kind in rows]
    return pa.array([b for b, _ in rows], type=pa.binary()), pa.array(props, type=pa.map_(pa.string(), pa.string()))


def test_rows_are_decoded_per_schema_in_one_call_each_and_bad_rows_get_null_and_a_reason() -> None:
    registry = Registry()
    avro = AvroSchemas(registry)
    decoder = ArrowDecoder(avro, JsonSchemas(registry), arrow_type_of(READER))
    rows: list[tuple[bytes, str | None]] = []
    for i in range(300):
        if i % 3 == 0:
            rows.append(_avro("v1", {"device": f"d{i}", "t": i / 2}))
        elif i % 3 == 1:
            rows.append(_avro("v2", {"device": f"d{i}", "t": i / 2, "site": "s"}))  # an evolved writer schema
        else:
            rows.append((json.dumps({"device": f"d{i}", "t": i / 2}).encode(),
                         "application/json;serialization=Json+j"))
    rows[10] = (b"\xff", "avro/binary+v1")                              # not Avro of its schema
    rows[20] = _avro("misfit", {"device": "x", "t": "not a number"})   # decodes, but not to the column's type
    rows[30] = (rows[0][0], "avro/binary+gone")                        # an id the registry does not have
    rows[40] = (rows[0][0], "avro/binary+gone")
    rows[50] = (b"{}", None)                                           # no content type
    calls: dict[str, int] = {}
    decoder.decode(*_columns(rows[:3]))  # schemas fetched and readers made
    for schema_id, reader in list(avro._readers.items()):
        def counted(joined: bytes, ends: list[int], _reader: Any = reader, _id: str = schema_id) -> Any:
            calls[_id] = calls.get(_id, 0) + 1
            return _reader(joined, ends)
        avro._readers[schema_id] = counted
    values, reasons = decoder.decode(*_columns(rows))
    got, why = values.to_pylist(), reasons.to_pylist()
    assert calls == {"v1": 1, "v2": 1}  # one call per schema for the whole batch, not one per row
    bad = {10, 20, 30, 40, 50}
    for i in range(300):
        if i in bad:
            assert got[i] is None and why[i], i
        else:
            assert got[i] == {"device": f"d{i}", "t": i / 2} and why[i] is None, (i, got[i], why[i])
    assert "is not Avro of schema 'v1'" in why[10]
    assert why[20].startswith("value does not fit the column type")
    assert "cannot be fetched: LookupError" in why[30] and why[30] == why[40]
    assert "is not avro/binary+<schema id>" in why[50]
    assert registry.calls.count("gone") == 1  # a failed id is not asked for again per row
