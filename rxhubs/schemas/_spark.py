"""Schema Registry payloads in Spark: a DataFrame of events gets a column of decoded values (Avro or JSON Schema).

:func:`with_decoded` runs on the executors through ``mapInArrow``: each task makes its own registry client
(``registry()``, so nothing unpicklable travels), and decodes each Arrow batch with
:class:`~rxhubs.schemas._arrow_decode.ArrowDecoder`: rows grouped by content type
(``systemProperties['content-type']``) and schema id, each schema's rows decoded in one call of the reader made
for it, schemas fetched once per task and cached. The output column's type comes from the reader's Avro schema;
a row that cannot be decoded, or whose value does not fit that type, gets null there (and its reason in
``reason_column`` when one is named): a batch never fails for a bad row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from rxhubs.errors import ConfigurationError

__all__ = ["StaticTokenCredential", "arrow_type_of", "with_decoded"]



def arrow_type_of(schema: Any, names: dict[str, Any] | None = None) -> Any:
    """The pyarrow type of an Avro schema (records, arrays, maps, enums, fixed, unions with null, primitives).

    Raises:
        ConfigurationError: A union of two non-null types (no single column type holds it).

    Example:
        >>> arrow_type_of({"type": "record", "name": "R", "fields": [{"name": "n", "type": ["null", "long"]}]})
        StructType(struct<n: int64>)
    """
    import pyarrow as pa

    names = {} if names is None else names
    if isinstance(schema, list):
        kinds = [s for s in schema if s != "null"]
        if len(kinds) != 1:
            raise ConfigurationError(f"a union of {kinds} has no single Spark column type")
        return arrow_type_of(kinds[0], names)
    if isinstance(schema, str):
        primitive = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                     "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
        if schema in primitive:
            return primitive[schema]
        if schema in names:
            return names[schema]
        raise ConfigurationError(f"unknown Avro type {schema!r}")
    kind = schema["type"]
    if kind == "record":
        struct = pa.struct([(f["name"], arrow_type_of(f["type"], names)) for f in schema["fields"]])
        names[schema["name"]] = struct
        return struct
    if kind == "array":
        return pa.list_(arrow_type_of(schema["items"], names))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type_of(schema["values"], names))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return arrow_type_of(kind, names)


def with_decoded(df: Any, reader_schema: str, registry: Callable[[], Any], *, column: str = "value",
                 body: str = "body", reason_column: str | None = None) -> Any:
    """``df`` with a column of the values its events' bodies encode (Schema Registry Avro or JSON Schema).

    Args:
        df: A DataFrame with the eventhubs source's columns (``body`` and ``systemProperties`` at least).
        reader_schema: The Avro schema (JSON text) whose type the new column has; events must decode to it.
        registry: A function of no arguments that returns an ``azure.schemaregistry.SchemaRegistryClient``,
            called once per task on the executors (e.g. ``functools.partial(SchemaRegistryClient, ...)``).
        column: The new column's name.
        body: The column of the encoded bodies.
        reason_column: Also a string column with why a row could not be decoded (null when it was).

    Returns:
        The DataFrame with ``column`` (and ``reason_column``) appended.

    Raises:
        ConfigurationError: A reader schema of no Spark type, or a column name already taken.

    Example:
        >>> arrow_type_of({"type": "map", "values": "double"})
        MapType(map<string, double>)
    """
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StringType, StructField, StructType

    value_type = arrow_type_of(json.loads(reader_schema))
    taken = set(df.columns)
    for name in (column, reason_column):
        if name is not None and name in taken:
            raise ConfigurationError(f"column {name!r} is already in the DataFrame")
    fields = [*df.schema.fields, StructField(column, from_arrow_type(value_type), True)]
    if reason_column is not None:
        fields.append(StructField(reason_column, StringType(), True))

    def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
        from rxhubs.schemas._arrow_decode import ArrowDecoder
        from rxhubs.schemas._avro import AvroSchemas
        from rxhubs.schemas._json import JsonSchemas

        client = registry()
        decoder = ArrowDecoder(AvroSchemas(client), JsonSchemas(client), value_type)
        for batch in batches:  # rows grouped by schema id, each group decoded in one call (ArrowDecoder)
            values, reasons = decoder.decode(batch.column(body), batch.column("systemProperties"))
            out = batch.append_column(column, values)
            if reason_column is not None:
                out = out.append_column(reason_column, reasons)
            yield out

    return df.mapInArrow(decode_batches, StructType(fields))


class StaticTokenCredential:
    """A credential that always gives one bearer token (the emulator's registry takes any; or one you obtained).

    Picklable, so a registry factory holding it travels to Spark executors.

    Example:
        >>> StaticTokenCredential("local").get_token("scope").token
        'local'
    """

    def __init__(self, token: str, expires_in: float = 3600.0) -> None:
        self.token = token
        self.expires_in = expires_in

    def __repr__(self) -> str:  # never the token
        return "StaticTokenCredential(...)"

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        import time

        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time() + self.expires_in))

    def close(self) -> None:
        return None
