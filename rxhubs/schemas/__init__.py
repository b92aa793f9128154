"""Azure Schema Registry payloads: Avro values decoded and encoded as the official ``azure-schemaregistry-avroencoder``.

The official encoder writes the Avro binary of a value as the body (no header) and ``avro/binary+<schema id>`` as
the content type; the schema is fetched from the registry by id. :class:`AvroSchemas` does the same both ways,
with fastavro and a schema cache, so events encoded by either side decode on the other; :func:`decode` is the
operator that decodes a batch's events, sending the undecodable ones to a dead-letter handler with the reason.
:class:`JsonSchemas` does the same for the official JSON Schema encoder's payloads; :func:`with_decoded` adds a
column of decoded values to a Spark DataFrame of events.
"""

from __future__ import annotations

from rxhubs.schemas._avro import AvroSchemas, DecodedBatch, UndecodableError, decode
from rxhubs.schemas._json import JsonSchemas
from rxhubs.schemas._spark import StaticTokenCredential, with_decoded

__all__ = ["AvroSchemas", "DecodedBatch", "JsonSchemas", "StaticTokenCredential", "UndecodableError", "decode",
           "with_decoded"]
