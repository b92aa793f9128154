"""JSON Schema payloads: the official ``JsonSchemaEncoder`` against the emulator's registry, and rxhubs, both ways."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from azure.schemaregistry.encoder.jsonencoder import JsonSchemaEncoder

from rxhubs import Event
from rxhubs.emulator import BackgroundEmulator
from rxhubs.schemas import JsonSchemas, UndecodableError

from .test_avro_registry import _registry

pytestmark = pytest.mark.timeout(120)

SCHEMA = ('{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"Reading","type":"object",'
          '"properties":{"device":{"type":"string"},"t":{"type":"number"}},"required":["device","t"]}')


def _validate(schema: dict[str, Any], content: Any) -> None:
    """A small validator (the required keys), where users pass jsonschema's."""
    missing = [k for k in schema.get("required", []) if k not in content]
    if missing:
        raise ValueError(f"missing {missing}")


def _event(body: bytes, content_type: str) -> Event:
    return Event(body, 0, "0", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), system_properties={"content-type": content_type})


def test_json_schema_payloads_decode_and_encode_both_ways_with_the_official_encoder() -> None:
    with BackgroundEmulator({"telemetry": 1}, tls=True, schema_registry=True) as emulator:
        client = _registry(emulator)
        schema_id = client.register_schema("readings", "Reading", SCHEMA, "Json").id
        official = JsonSchemaEncoder(client=client, validate=_validate)
        message = official.encode({"device": "d1", "t": 21.5}, schema_id=schema_id)
        assert message["content_type"].replace(" ", "").endswith(f"Json+{schema_id}")
        schemas = JsonSchemas(client, group_name="readings", validate=_validate)
        assert schemas.decode_event(_event(message["content"], message["content_type"])) == {"device": "d1",
                                                                                              "t": 21.5}
        body, content_type = schemas.encode({"device": "d2", "t": 3.0}, SCHEMA)
        assert official.decode({"content": body, "content_type": content_type}) == {"device": "d2", "t": 3.0}
        with pytest.raises(UndecodableError, match="does not match schema"):
            schemas.decode_event(_event(b'{"device": "d3"}', content_type))
        with pytest.raises(UndecodableError, match="not JSON"):
            schemas.decode_event(_event(b"\xff", content_type))
        values, failed = schemas.decode_values([_event(body, content_type), _event(b"{}", "text/plain")])
        assert values == [{"device": "d2", "t": 3.0}, None] and [i for i, _ in failed] == [1]
