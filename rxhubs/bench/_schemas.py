"""Scenario ``schemas``: Schema Registry Avro events decoded per second, rxhubs against the official encoder.

The emulator (TLS and its Schema Registry, in this process's background thread) registers one record schema of
six fields; the official ``azure-schemaregistry-avroencoder`` encodes N values (full: 200,000; ``--quick``:
50,000; ``--smoke``: 2,000) into bodies with the ``avro/binary+<id>`` content type. Then the same events are
decoded twice, each side's schema cache warmed by one decode first: by the official ``AvroEncoder.decode`` per
event (the way Python users decode today), and by rxhubs (``AvroSchemas.decode_values``, what ``decode`` runs per
batch: a reader made for the schema, fastavro where it refuses), in ten alternating slices so that a change of
the machine's load favours neither. Figures are events per CPU second of the one thread (wall figures beside).
Target: at least 5x the official encoder's events per second.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rxhubs.bench._report import figure, sized

SCHEMA = ('{"type":"record","name":"Reading","namespace":"bench","fields":[{"name":"device","type":"string"},'
          '{"name":"ts","type":"long"},{"name":"celsius","type":"double"},{"name":"humidity","type":"double"},'
          '{"name":"ok","type":"boolean"},{"name":"site","type":"string"}]}')


ROUNDS = 10


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
        ours, theirs, cpu, wall = _interleaved(schemas, official, events, messages)
        client.close()
    if ours != theirs or ours != values:
        raise AssertionError("rxhubs and the official encoder decoded different values")
    load = round(os.getloadavg()[0], 2)
    return [figure("schemas", "decoded_events_per_s", "events/s", round(count / cpu[0]), round(count / cpu[1]),
                   "azure-schemaregistry-avroencoder 1.0.0 AvroEncoder.decode per event", ">= 5x", events=count,
                   per="CPU second", rounds=ROUNDS, wall_events_per_s=[round(count / wall[0]), round(count / wall[1])],
                   load_average=load)]


def _interleaved(schemas: Any, official: Any, events: list[Any], messages: list[Any]
                 ) -> tuple[list[Any], list[Any], list[float], list[float]]:
    """Both decoders over the same events in ``ROUNDS`` alternating slices: CPU and wall seconds of each side.

    Alternating slices keep a change in the machine's load from favouring either side; CPU time (both run on
    this one thread) is what a core spends per event, wall time is reported beside it.
    """
    ours: list[Any] = []
    theirs: list[Any] = []
    cpu, wall = [0.0, 0.0], [0.0, 0.0]
    step = -(-len(events) // ROUNDS)
    for lo in range(0, len(events), step):
        c, w = time.process_time(), time.perf_counter()
        values, failures = schemas.decode_values(events[lo:lo + step])  # what decode() runs per batch
        cpu[0] += time.process_time() - c
        wall[0] += time.perf_counter() - w
        assert not failures
        ours.extend(values)
        c, w = time.process_time(), time.perf_counter()
        theirs.extend(official.decode(m) for m in messages[lo:lo + step])
        cpu[1] += time.process_time() - c
        wall[1] += time.perf_counter() - w
    return ours, theirs, cpu, wall
