"""JSON Schema payloads through the Schema Registry, as ``azure.schemaregistry.encoder.jsonencoder`` writes them.

The official JSON Schema encoder writes the value as UTF-8 JSON and ``application/json;serialization=Json+<id>``
as the content type (``azure-schemaregistry`` 1.3.0, ``jsonencoder/_utils.py``); it validates with a function
given to it. :class:`JsonSchemas` reads and writes the same, with the same optional validation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rxhubs._models import Event
from rxhubs.errors import ConfigurationError
from rxhubs.schemas._avro import UndecodableError
from rxhubs.schemas._fetch import fetch_once

__all__ = ["JsonSchemas"]

PREFIX = "application/json;serialization=Json+"


class JsonSchemas:
    """JSON Schema payloads: decoded and encoded as the official JSON Schema encoder does, schemas cached.

    Args:
        client: ``azure.schemaregistry.SchemaRegistryClient`` (sync).
        group_name: The schema group to register schemas in when encoding.
        validate: ``validate(schema=..., content=...)`` raising on an invalid value: the function the official
            encoder takes (e.g. one calling ``jsonschema``); None: only well-formed JSON is checked.

    Example:
        >>> JsonSchemas.schema_id_of("application/json; serialization=Json+ab12"), JsonSchemas.schema_id_of("x")
        ('ab12', None)
    """

    def __init__(self, client: Any, group_name: str | None = None,
                 validate: Callable[..., None] | None = None) -> None:
        if validate is not None and not callable(validate):
            raise ConfigurationError("validate must be a function of (schema, value)")
        self.client = client
        self.group_name = group_name
        self.validate = validate
        self._parsed: dict[str, Any] = {}
        self._failed: dict[str, tuple[float, BaseException]] = {}  # schema id -> when and why its fetch failed
        self._ids: dict[str, str] = {}

    @staticmethod
    def schema_id_of(content_type: object) -> str | None:
        """The schema id of an ``application/json;serialization=Json+<id>`` content type (spaces ignored)."""
        if not isinstance(content_type, str):
            return None
        compact = content_type.replace(" ", "")
        if compact.lower().startswith(PREFIX.lower()) and len(compact) > len(PREFIX):
            return compact[len(PREFIX):]
        return None

    def fetch(self, schema_id: str) -> Any:
        """The schema of ``schema_id`` (a dict), from the cache or the registry (a failure is remembered a while)."""
        return fetch_once(self._parsed, self._failed, schema_id,
                          lambda i: json.loads(self.client.get_schema(i).definition))

    def decode_event(self, event: Event) -> Any:
        """The value of one event.

        Raises:
            UndecodableError: Not this content type, an unknown id, a body that is not JSON, or one ``validate``
                refused (the reason in the message).
        """
        schema_id = self.schema_id_of(event.system_properties.get("content-type"))
        if schema_id is None:
            raise UndecodableError(f"content type {event.system_properties.get('content-type')!r} is not "
                                   f"{PREFIX}<schema id>")
        try:
            schema = self.fetch(schema_id)
        except Exception as exc:
            raise UndecodableError(f"schema {schema_id!r} cannot be fetched: {type(exc).__name__}") from exc
        try:
            value = json.loads(event.body)
        except ValueError as exc:
            raise UndecodableError(f"body is not JSON: {exc}") from exc
        if self.validate is not None:
            try:
                self.validate(schema=schema, content=value)
            except Exception as exc:
                raise UndecodableError(f"value does not match schema {schema_id!r}: {exc}") from exc
        return value

    def decode_values(self, events: Sequence[Event]) -> tuple[list[Any], list[tuple[int, UndecodableError]]]:
        """The values of ``events`` (None where undecodable) and the failures ``(index, error)``."""
        values: list[Any] = []
        failed: list[tuple[int, UndecodableError]] = []
        for i, event in enumerate(events):
            try:
                values.append(self.decode_event(event))
            except UndecodableError as exc:
                values.append(None)
                failed.append((i, exc))
        return values, failed

    def encode(self, value: Any, schema: str) -> tuple[bytes, str]:
        """``(body, content_type)`` of ``value``, as the official encoder writes them (the schema registered once).

        Raises:
            ConfigurationError: No ``group_name`` to register the schema in.
            ValueError: ``validate`` refused the value.
        """
        schema_id = self._ids.get(schema)
        if schema_id is None:
            if self.group_name is None:
                raise ConfigurationError("JsonSchemas(group_name=...) is needed to register schemas for encoding")
            name = json.loads(schema).get("title") or json.loads(schema).get("$id") or "schema"
            schema_id = self._ids[schema] = self.client.register_schema(self.group_name, name, schema, "Json").id
        if self.validate is not None:
            self.validate(schema=self.fetch(schema_id), content=value)
        return json.dumps(value, separators=(",", ":")).encode("utf-8"), PREFIX + schema_id
