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


def test_a_column_of_decoded_values_with_null_and_a_reason_for_bad_rows(spark: Any) -> None:
    with BackgroundEmulator({"telemetry": 1}, tls=True, schema_registry=True) as emulator:
        conn, options = emulator.tls_connection_string("telemetry"), emulator.tls_client_options()
        registry = functools.partial(SchemaRegistryClient, fully_qualified_namespace=emulator.schema_registry_namespace,
                                     credential=StaticTokenCredential("local"),
                                     connection_verify=options["connection_verify"])
        official = AvroEncoder(client=registry(), group_name="readings", auto_register=True)
        values = [{"device": f"d{i % 3}", "t": i / 4, "tags": ["a"] * (i % 2)} for i in range(60)]
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch()
            for i, value in enumerate(values):
                message = official.encode(value, schema=SCHEMA)
                event = EventData(message["content"])
                event.content_type = message["content_type"]
                batch.add(event)
                if i % 20 == 0:
                    bad = EventData(b"\xff\xff\xff")
                    bad.content_type = message["content_type"]
                    batch.add(bad)
            producer.send_batch(batch)
        df = spark.read.format("eventhubs").option("connectionString", emulator.connection_string("telemetry")).load()
        decoded = with_decoded(df, SCHEMA, registry, reason_column="why")
        rows = decoded.orderBy("sequenceNumber").select("value", "why").collect()
    good = [r.value.asDict(recursive=True) for r in rows if r.value is not None]
    assert good == values  # the official encoder's values, decoded in Spark, in order
    bad = [r.why for r in rows if r.value is None]
    assert len(bad) == 3 and all("is not Avro of schema" in why for why in bad)
