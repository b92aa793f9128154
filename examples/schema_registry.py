"""Schema Registry events: encoded by the official Avro encoder, decoded by rxhubs, bad ones dead-lettered.

Needs ``pip install 'rxhubs[schemas,tls]' azure-schemaregistry-avroencoder``. Starts the emulator with TLS and its
Schema Registry (HTTPS); the unmodified ``AvroEncoder`` registers a schema and encodes 20 readings, which the
official producer sends, with 5 events that are not Avro between them. ``rxhubs.schemas.decode`` turns each
batch's events into values (``DecodedBatch.values``) and hands the 5 undecodable ones to ``hops.dead_letter``
with their reason; the partition goes on.
    python examples/schema_registry.py
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from azure.core.credentials import AccessToken
from azure.eventhub import EventData, EventHubProducerClient
from azure.schemaregistry import SchemaRegistryClient
from azure.schemaregistry.encoder.avroencoder import AvroEncoder
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import BackgroundEmulator
from rxhubs.schemas import AvroSchemas, decode
from rxhubs.testing import InMemoryEventHub

SCHEMA = ('{"type":"record","name":"Reading","namespace":"demo","fields":[{"name":"device","type":"string"},'
          '{"name":"celsius","type":"double"}]}')


class LocalToken:
    """Any bearer token will do for the emulator (use azure-identity's credentials against Azure)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("local", int(time.time()) + 3600)

    def close(self) -> None:
        return None


async def consume(conn: str, options: dict[str, str], schemas: AvroSchemas, dlq: InMemoryEventHub) -> list[Any]:
    values: list[Any] = []
    stop = rxhubs.Shutdown()
    hub = rxhubs.EventHub.from_connection_string(conn, **options)

    def keep(batch: Any) -> None:
        values.extend(v for v in batch.values if v is not None)
        if len(values) + len(dlq.events("0")) >= 25:
            stop.request()

    pipeline = rxhubs.consume(hub, "$Default", rxhubs.stores.InMemoryCheckpointStore(),
                              load_balancing_interval=1.0).pipe(
        decode(schemas, on_undecodable=hops.dead_letter(dlq)), ops.do_action(keep))
    try:
        await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), timeout=60)
    finally:
        await hub.close()
    return values


def main() -> int:
    with BackgroundEmulator({"readings": 1}, tls=True, schema_registry=True) as emulator:
        conn, options = emulator.tls_connection_string("readings"), emulator.tls_client_options()
        registry = SchemaRegistryClient(fully_qualified_namespace=emulator.schema_registry_namespace,
                                        credential=LocalToken(), connection_verify=options["connection_verify"])
        encoder = AvroEncoder(client=registry, group_name="telemetry", auto_register=True)
        readings = [{"device": f"sensor-{i % 4}", "celsius": 20 + i / 4} for i in range(20)]
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch()
            for i, reading in enumerate(readings):
                message = encoder.encode(reading, schema=SCHEMA)
                event = EventData(message["content"])
                event.content_type = message["content_type"]
                batch.add(event)
                if i % 4 == 0:
                    batch.add(EventData(b'{"not": "avro"}'))  # no Schema Registry content type
            producer.send_batch(batch)
        dlq = InMemoryEventHub(partition_count=1)
        values = asyncio.run(consume(conn, options, AvroSchemas(registry), dlq))
        registry.close()
    reasons = sorted({str(e.properties["rxhubs.error.message"]) for e in dlq.events("0")})
    print(f"decoded {len(values)} readings, e.g. {values[0]}; dead-lettered {len(dlq.events('0'))}: {reasons}")
    return 0 if values == readings and len(dlq.events("0")) == 5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
