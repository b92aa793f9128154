"""Azure Schema Registry payloads: Avro values decoded and encoded as the official ``azure-schemaregistry-avroencoder``.

The official encoder writes the Avro binary of a value as the body (no header) and ``avro/binary+<schema id>`` as
the content type; the schema is fetched from the registry by id. :class:`AvroSchemas` does the same both ways,
with fastavro and a schema cache, so events encoded by either side decode on the other; :func:`decode` is the
operator that decodes a batch's events, sending the undecodable ones to a dead-letter handler with the reason.
"""

from __future__ import annotations

from rxhubs.schemas._avro import AvroSchemas, DecodedBatch, UndecodableError, decode

__all__ = ["AvroSchemas", "DecodedBatch", "UndecodableError", "decode"]
