"""``rxhubs.schemas.with_decoded``: a Spark column of the values the official Avro encoder wrote, decoded."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.schemaregistry import SchemaRegistryClient
from azure.schemaregistry.encoder.avroencoder import AvroEncoder

from rxhubs.emulator import BackgroundEmulator
from rxhubs.schemas import StaticTokenCredential, with_decoded

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SCHEMA = ('{"type":"record","name":"Reading","namespace":"demo","fields":[{"name":"device","type":"string"},'
          '{"name":"t","type":"double"},{"name":"tags","type":{"type":"array","items":"string"}}]}')


V2 = ('{"type":"record","name":"Reading","namespace":"demo","fields":[{"name":"device","type":"string"},'
      '{"name":"t","type":"double"},{"name":"tags","type":{"type":"array","items":"string"}},'
      '{"name":"site","type":"string"}]}')
MISFIT = ('{"type":"record","name":"Odd","namespace":"demo","fields":[{"name":"device","type":"string"},'
          '{"name":"t","type":"string"}]}')


def _event(message: Any) -> EventData:
    event = EventData(message["content"])
    event.content_type = message["content_type"]
    return event


def test_a_column_of_decoded_values_with_null_and_a_reason_for_bad_rows(spark: Any) -> None:
    with BackgroundEmulator({"telemetry": 1}, tls=True, schema_registry=True) as emulator:
        conn, options = emulator.tls_connection_string("telemetry"), emulator.tls_client_options()
        registry = functools.partial(SchemaRegistryClient, fully_qualified_namespace=emulator.schema_registry_namespace,
                                     credential=StaticTokenCredential("local"),
                                     connection_verify=options["connection_verify"])
        official = AvroEncoder(client=registry(), group_name="readings", auto_register=True)
        values = [{"device": f"d{i % 3}", "t": i / 4, "tags": ["a"] * (i % 2)} for i in range(60)]
        expected: list[Any] = []
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch()
            for i, value in enumerate(values):
                if i % 2:  # every other row written by an evolved schema (another id) with a field more
                    batch.add(_event(official.encode({**value, "site": "s"}, schema=V2)))
                else:
                    batch.add(_event(official.encode(value, schema=SCHEMA)))
                expected.append(value)
                if i % 20 == 0:
                    bad = _event(official.encode(value, schema=SCHEMA))  # for its content type
                    broken = EventData(b"\xff\xff\xff")
                    broken.content_type = bad.content_type
                    batch.add(broken)
                    expected.append("is not Avro of schema")
            batch.add(_event(official.encode({"device": "x", "t": "warm"}, schema=MISFIT)))
            expected.append("does not fit the column type")
            unknown = EventData(b"\x00")
            unknown.content_type = "avro/binary+00000000000000000000000000000000"
            batch.add(unknown)
            expected.append("cannot be fetched")
            producer.send_batch(batch)
        df = spark.read.format("eventhubs").option("connectionString", emulator.connection_string("telemetry")).load()
        decoded = with_decoded(df, SCHEMA, registry, reason_column="why")
        rows = decoded.orderBy("sequenceNumber").select("value", "why").collect()
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        if isinstance(want, str):  # a bad row: null, with its reason, and the job went on
            assert row.value is None and want in row.why, (row, want)
        else:  # the official encoder's values, both writer schemas, decoded in Spark, in order
            assert row.value.asDict(recursive=True) == want and row.why is None, (row, want)
