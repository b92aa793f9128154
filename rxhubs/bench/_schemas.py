"""Scenario ``schemas``: Schema Registry Avro events decoded per second, rxhubs against the official encoder.

The emulator (TLS and its Schema Registry, in this process's background thread) registers one record schema of
six fields; the official ``azure-schemaregistry-avroencoder`` encodes N values (full: 200,000; ``--quick``:
50,000; ``--smoke``: 2,000) into bodies with the ``avro/binary+<id>`` content type. Then the same events are
decoded twice, each side's schema cache warmed by one decode first: by the official ``AvroEncoder.decode`` per
event (the way Python users decode today), and by rxhubs (``AvroSchemas.decode_event``: fastavro and a parsed
schema cache). Target: at least 5x the official encoder's events per second.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rxhubs.bench._report import figure, sized

SCHEMA = ('{"type":"record","name":"Reading","namespace":"bench","fields":[{"name":"device","type":"string"},'
          '{"name":"ts","type":"long"},{"name":"celsius","type":"double"},{"name":"humidity","type":"double"},'
          '{"name":"ok","type":"boolean"},{"name":"site","type":"string"}]}')


class _Token:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("bench", int(time.time()) + 3600)

    def close(self) -> None:
        return None


def run(args: Any = None) -> list[dict[str, Any]]:
    import datetime as dt

    from azure.schemaregistry import SchemaRegistryClient
    from azure.schemaregistry.encoder.avroencoder import AvroEncoder

    from rxhubs._models import Event
    from rxhubs.emulator import BackgroundEmulator
    from rxhubs.schemas import AvroSchemas

    count = sized(args, 200_000, 50_000, 2_000)
    values = [{"device": f"sensor-{i % 50}", "ts": 1_700_000_000_000 + i, "celsius": 20 + (i % 100) / 10,
               "humidity": 0.5, "ok": i % 7 != 0, "site": "plant-3"} for i in range(count)]
    with BackgroundEmulator({"bench": 1}, tls=True, schema_registry=True) as emulator:
        client = SchemaRegistryClient(fully_qualified_namespace=str(emulator.schema_registry_namespace),
                                      credential=_Token(),
                                      connection_verify=emulator.tls_client_options()["connection_verify"])
        official = AvroEncoder(client=client, group_name="bench", auto_register=True)
        messages = [official.encode(v, schema=SCHEMA) for v in values]
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        events = [Event._unchecked(m["content"], i, str(i), when, None, {}, {"content-type": m["content_type"]})
                  for i, m in enumerate(messages)]
        schemas = AvroSchemas(client)
        schemas.decode_event(events[0])
        official.decode(messages[0])  # both caches warm: no registry call is timed
        start = time.perf_counter()
        ours, failures = schemas.decode_values(events)  # what decode() runs per batch
        assert not failures
        rxhubs_s = time.perf_counter() - start
        start = time.perf_counter()
        theirs = [official.decode(m) for m in messages]
        official_s = time.perf_counter() - start
        client.close()
    if ours != theirs or ours != values:
        raise AssertionError("rxhubs and the official encoder decoded different values")
    load = round(os.getloadavg()[0], 2)
    return [figure("schemas", "decoded_events_per_s", "events/s", round(count / rxhubs_s), round(count / official_s),
                   "azure-schemaregistry-avroencoder 1.0.0 AvroEncoder.decode per event", ">= 5x", events=count,
                   load_average=load)]
