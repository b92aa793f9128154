"""One Arrow batch of events to a column of decoded values: rows grouped by schema, each group decoded at once.

What :func:`~rxhubs.schemas.with_decoded` runs on the executors for every Arrow batch ``mapInArrow`` hands it,
and usable on its own with pyarrow. The rows' content types are read once; Avro rows go to
:meth:`AvroSchemas.decode_values`, which groups them by schema id and reads each group's bodies, laid end to end,
with one call of the reader made for that schema; JSON Schema rows go to :meth:`JsonSchemas.decode_values`. A
schema id met for the first time is fetched once (a failed fetch is asked again only after
``RETRY_FAILED_FETCH`` seconds, see ``rxhubs/schemas/_fetch.py``). A row that cannot be decoded, or whose value
does not fit the column's type (a writer schema the reader's type cannot hold), gets null and its reason: a bad
row never fails the batch.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from rxhubs._models import Event

__all__ = ["ArrowDecoder"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class ArrowDecoder:
    """Decodes Arrow columns of bodies and system properties into an Arrow column of ``value_type``.

    Args:
        avro: An :class:`~rxhubs.schemas.AvroSchemas` (its cache is reused across batches).
        json_schemas: A :class:`~rxhubs.schemas.JsonSchemas`, or None to treat JSON rows as undecodable.
        value_type: The pyarrow type of the values (:func:`~rxhubs.schemas.arrow_type_of` of the reader schema).

    Example:
        >>> import io, json, fastavro, pyarrow as pa
        >>> from rxhubs.schemas import AvroSchemas
        >>> from rxhubs.schemas._spark import arrow_type_of
        >>> schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
        >>> class Registry:  # what SchemaRegistryClient.get_schema gives
        ...     def get_schema(self, schema_id):
        ...         return type("Schema", (), {"definition": json.dumps(schema)})()
        >>> body = io.BytesIO(); fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {"n": 7})
        >>> decoder = ArrowDecoder(AvroSchemas(Registry()), None, arrow_type_of(schema))
        >>> values, reasons = decoder.decode(pa.array([body.getvalue(), b"?"]),
        ...     pa.array([[("content-type", "avro/binary+1")], []], type=pa.map_(pa.string(), pa.string())))
        >>> values.to_pylist(), reasons.to_pylist()
        ([{'n': 7}, None], [None, 'content type None is not avro/binary+<schema id>'])
    """

    def __init__(self, avro: Any, json_schemas: Any, value_type: Any) -> None:
        self.avro = avro
        self.json = json_schemas
        self.value_type = value_type

    def decode(self, bodies: Any, system_properties: Any) -> tuple[Any, Any]:
        """The values (an Arrow array of ``value_type``) and the reasons (strings, null where decoded)."""
        import pyarrow as pa

        events = [Event._unchecked(b or b"", 0, "", _EPOCH, None, {}, dict(s or ()))
                  for b, s in zip(bodies.to_pylist(), system_properties.to_pylist(), strict=True)]
        values: list[Any] = [None] * len(events)
        reasons: list[str | None] = [None] * len(events)
        rows: dict[int, list[int]] = {0: [], 1: []}
        for i, event in enumerate(events):
            is_json = self.json is not None and self.json.schema_id_of(event.system_properties.get("content-type"))
            rows[1 if is_json else 0].append(i)
        for kind, members in rows.items():
            if not members:
                continue
            schemas = self.json if kind else self.avro
            subset = [events[i] for i in members]
            self._fetch_new(schemas, subset)
            decoded, failed = schemas.decode_values(subset)
            for i, value in zip(members, decoded, strict=True):
                values[i] = value
            for j, exc in failed:
                reasons[members[j]] = str(exc)
        return self._column(values, reasons), pa.array(reasons, type=pa.string())

    @staticmethod
    def _fetch_new(schemas: Any, events: Sequence[Event]) -> None:
        """Fetch the ids not cached yet, once each (a failure is remembered by ``schemas``; its rows say why)."""
        ids = {schemas.schema_id_of(e.system_properties.get("content-type")) for e in events}
        for schema_id in ids - {None} - set(schemas._parsed):
            try:
                schemas.fetch(schema_id)
            except Exception:
                continue

    def _column(self, values: list[Any], reasons: list[str | None]) -> Any:
        """``values`` as an array of the column type; a value that does not fit becomes null with the reason."""
        import pyarrow as pa

        try:
            return pa.array(values, type=self.value_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        for i, value in enumerate(values):
            if value is None:
                continue
            try:
                pa.array([value], type=self.value_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                values[i] = None
                reasons[i] = f"value does not fit the column type {self.value_type}: {exc}"
        return pa.array(values, type=self.value_type)
