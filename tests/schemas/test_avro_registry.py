"""Schema Registry events through the emulator's registry (HTTPS): the official clients and rxhubs, both ways.

The unmodified ``azure-schemaregistry`` client and ``azure-schemaregistry-avroencoder`` register and encode
against the emulator; rxhubs decodes what the official encoder wrote, the official encoder decodes what rxhubs
wrote, and 1,000 undecodable events go to dead letters with their reason while the partition goes on.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from azure.eventhub import EventData, EventHubProducerClient
from azure.schemaregistry import SchemaRegistryClient
from azure.schemaregistry.encoder.avroencoder import AvroEncoder
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import BackgroundEmulator
from rxhubs.schemas import AvroSchemas, DecodedBatch, decode
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

pytestmark = pytest.mark.timeout(180)

HUB = "telemetry"
SCHEMA = ('{"type":"record","name":"Reading","namespace":"demo","fields":[{"name":"device","type":"string"},'
          '{"name":"t","type":"double"}]}')
GOOD = 100
BAD = 1000


class Token:
    """A bearer-token credential (what azure-identity's credentials give; the emulator accepts any token)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("local-token", int(time.time()) + 3600)

    def close(self) -> None:
        return None


class NoToken(Token):
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("", int(time.time()) + 3600)


def _registry(emulator: BackgroundEmulator, credential: Any = None) -> SchemaRegistryClient:
    return SchemaRegistryClient(fully_qualified_namespace=emulator.schema_registry_namespace,
                                credential=credential or Token(),
                                connection_verify=emulator.tls_client_options()["connection_verify"])


def test_the_official_registry_client_and_encoder_work_unmodified_against_the_emulator() -> None:
    with BackgroundEmulator({HUB: 1}, tls=True, schema_registry=True) as emulator:
        client = _registry(emulator)
        first = client.register_schema("readings", "demo.Reading", SCHEMA, "Avro")
        again = client.register_schema("readings", "demo.Reading", SCHEMA, "Avro")
        assert first.id == again.id and first.version == 1
        assert client.get_schema_properties("readings", "demo.Reading", SCHEMA, "Avro").id == first.id
        assert client.get_schema(first.id).definition == SCHEMA
        official = AvroEncoder(client=client, group_name="readings", auto_register=True)
        message = official.encode({"device": "d1", "t": 21.5}, schema=SCHEMA)
        assert message["content_type"] == f"avro/binary+{first.id}"
        assert official.decode(message) == {"device": "d1", "t": 21.5}
        with pytest.raises(ClientAuthenticationError):  # no bearer token: refused
            _registry(emulator, NoToken()).get_schema(first.id)


async def test_rxhubs_and_the_official_encoder_decode_each_other_and_undecodable_events_go_to_dead_letters(
) -> None:
    with BackgroundEmulator({HUB: 1}, tls=True, schema_registry=True) as emulator:
        conn, options = emulator.tls_connection_string(HUB), emulator.tls_client_options()
        client = _registry(emulator)
        official = AvroEncoder(client=client, group_name="readings", auto_register=True)
        values = [{"device": f"d{i % 3}", "t": i / 2} for i in range(GOOD)]
        good_ids = official.encode(values[0], schema=SCHEMA)["content_type"]
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            for chunk in range(0, BAD, 250):  # undecodable: a bad payload, an unknown id, no content type
                batch = producer.create_batch()
                for i in range(chunk, chunk + 250):
                    event = EventData(b"\xff\xfe not avro" if i % 3 else b"\x02x")
                    event.content_type = good_ids if i % 3 == 1 else "avro/binary+no-such-id" if i % 3 == 2 \
                        else "application/json"
                    batch.add(event)
                producer.send_batch(batch)
            batch = producer.create_batch()
            for value in values:  # then good ones: the partition went on
                message = official.encode(value, schema=SCHEMA)
                event = EventData(message["content"])
                event.content_type = message["content_type"]
                batch.add(event)
            producer.send_batch(batch)
        dlq = InMemoryEventHub(partition_count=1)
        schemas = AvroSchemas(client)
        decoded: list[Any] = []
        seen = [0]

        def keep(batch: rxhubs.EventBatch) -> None:
            assert isinstance(batch, DecodedBatch)
            seen[0] += len(batch)
            decoded.extend(v for v in batch.values if v is not None)
            if seen[0] >= BAD + GOOD:
                stop.request()

        hub = rxhubs.EventHub.from_connection_string(conn, **options)
        stop = rxhubs.Shutdown()
        pipeline = rxhubs.consume(hub, "$Default", InMemoryCheckpointStore(), load_balancing_interval=1.0,
                                  max_wait=0.2).pipe(
            decode(schemas, on_undecodable=hops.dead_letter(dlq)), ops.do_action(keep))
        try:
            await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), timeout=150)
        finally:
            await hub.close()
        assert decoded == values  # what the official encoder wrote, decoded by rxhubs, in order
        letters = dlq.events("0")
        assert len(letters) == BAD
        reasons = [str(e.properties["rxhubs.error.message"]) for e in letters]
        assert sum("is not Avro of schema" in r for r in reasons) == BAD // 3
        assert sum("cannot be fetched" in r for r in reasons) == BAD // 3
        assert sum("is not avro/binary+<schema id>" in r for r in reasons) == BAD - 2 * (BAD // 3)
        assert all(e.properties["rxhubs.error.type"] == "UndecodableError" for e in letters)
        # the other way: rxhubs encodes, the official encoder decodes
        writer = AvroSchemas(client, group_name="readings")
        for value in values[:10]:
            body, content_type = writer.encode(value, SCHEMA)
            assert official.decode({"content": body, "content_type": content_type}) == value
