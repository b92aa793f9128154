"""Avro through the Schema Registry, wire-compatible with ``azure-schemaregistry-avroencoder`` (see the package)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from reactivex import Observable
from reactivex import operators as ops

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.schemas._avro_compile import MISSING, compile_reader
from rxhubs.schemas._fetch import fetch_once

__all__ = ["AvroSchemas", "DecodedBatch", "UndecodableError", "decode"]

PREFIX = "avro/binary+"


class UndecodableError(RxHubsError):
    """An event could not be decoded: no Schema Registry content type, an unknown schema id, or a bad payload."""


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - an install without the extra
        raise ConfigurationError("Avro payloads need fastavro: pip install 'rxhubs[capture]'") from exc
    return fastavro


class AvroSchemas:
    """Schemas by id from a registry client, cached; Avro values decoded and encoded as the official encoder does.

    Args:
        client: ``azure.schemaregistry.SchemaRegistryClient`` (the sync client; its calls run in a thread when
            :func:`decode` meets a new id).
        group_name: The schema group to register schemas in when encoding.

    Example:
        >>> schemas = AvroSchemas(client=None)
        >>> schemas.schema_id_of("avro/binary+0a1b2c"), schemas.schema_id_of("application/json")
        ('0a1b2c', None)
    """

    def __init__(self, client: Any, group_name: str | None = None) -> None:
        self.client = client
        self.group_name = group_name
        self._parsed: dict[str, Any] = {}
        self._failed: dict[str, tuple[float, BaseException]] = {}  # schema id -> when and why its fetch failed
        self._readers: dict[str, Any] = {}  # schema id -> compiled reader, or None (fastavro reads it)
        self._ids: dict[str, str] = {}  # schema text -> id, for encoding

    @staticmethod
    def schema_id_of(content_type: object) -> str | None:
        """The schema id of an ``avro/binary+<id>`` content type (None for any other)."""
        if isinstance(content_type, str) and content_type.startswith(PREFIX) and len(content_type) > len(PREFIX):
            return content_type[len(PREFIX):]
        return None

    def fetch(self, schema_id: str) -> Any:
        """The parsed schema of ``schema_id``, from the cache or the registry (a blocking call on a miss).

        A failed fetch is remembered: the same error again, without a registry call, for
        ``rxhubs.schemas._fetch.RETRY_FAILED_FETCH`` seconds.
        """
        return fetch_once(self._parsed, self._failed, schema_id,
                          lambda i: _fastavro().parse_schema(json.loads(self.client.get_schema(i).definition)))

    def _reader(self, schema_id: str) -> Any:
        if schema_id not in self._readers:
            self._readers[schema_id] = compile_reader(self._parsed[schema_id])
        return self._readers[schema_id]

    def decode_values(self, events: Sequence[Event]) -> tuple[list[Any], list[tuple[int, UndecodableError]]]:
        """The values of ``events`` (None where undecodable) and the failures ``(index, error)``; the hot path.

        Events are grouped by schema id, and each group's bodies are read one after the other from one buffer
        with the reader made for that schema (:func:`~rxhubs.schemas._avro_compile.compile_reader`; fastavro for
        schemas it leaves alone): an event's value counts only if its read ends exactly where its body ends (what
        :meth:`decode_event` checks with a stream of its own); any other event, and any event whose read fails or
        strays into the next body, is decoded alone by fastavro, which gives its value or says why not. Schemas
        must be in the cache (else the event fails as unknown: :func:`decode` fetches new ids first).
        """
        read = _fastavro().schemaless_reader
        parsed = self._parsed
        values: list[Any] = [None] * len(events)
        kinds = [event.system_properties.get("content-type") for event in events]
        groups: dict[str, Sequence[int]] = {}
        alone: list[int] = []
        for content_type in set(kinds):
            if content_type.__class__ is str and content_type.startswith(PREFIX) and content_type[12:] in parsed:
                groups[content_type[12:]] = range(len(kinds)) if len(kinds) == kinds.count(content_type) else \
                    [i for i, kind in enumerate(kinds) if kind == content_type]
            else:
                alone.extend(i for i, kind in enumerate(kinds) if kind == content_type)
        for schema_id, members in groups.items():
            bodies = [events[i].body for i in members]
            joined = b"".join(bodies)
            compiled = self._reader(schema_id)
            if compiled is not None:  # the reader made for this schema reads the whole group in one call
                for i, value in zip(members, compiled(joined, list(accumulate(map(len, bodies)))), strict=True):
                    if value is MISSING:
                        alone.append(i)
                    else:
                        values[i] = value
                continue
            schema = parsed[schema_id]
            stream = io.BytesIO(joined)
            tell = stream.tell
            end = 0
            for i, body in zip(members, bodies, strict=True):
                end += len(body)
                try:
                    value = read(stream, schema)
                    if tell() == end:
                        values[i] = value
                        continue
                except Exception:  # decoded alone below, which says why
                    pass
                stream.seek(end)
                alone.append(i)
        failed: list[tuple[int, UndecodableError]] = []
        for i in sorted(alone):
            try:
                values[i] = self.decode_event(events[i])
            except UndecodableError as exc:
                failed.append((i, exc))
        return values, failed

    def decode_event(self, event: Event) -> Any:
        """The value of one event.

        Raises:
            UndecodableError: No ``avro/binary+<id>`` content type, an unknown id, or a payload that is not that
                schema's Avro binary (the reason in the message).
        """
        schema_id = self.schema_id_of(event.system_properties.get("content-type"))
        if schema_id is None:
            raise UndecodableError(f"content type {event.system_properties.get('content-type')!r} is not "
                                   f"avro/binary+<schema id>")
        try:
            schema = self.fetch(schema_id)
        except Exception as exc:
            raise UndecodableError(f"schema {schema_id!r} cannot be fetched: {type(exc).__name__}") from exc
        body = io.BytesIO(event.body)
        try:
            value = _fastavro().schemaless_reader(body, schema)
        except Exception as exc:
            raise UndecodableError(f"body is not Avro of schema {schema_id!r}: {type(exc).__name__}: {exc}") from exc
        if body.tell() != len(event.body):
            raise UndecodableError(f"body is not Avro of schema {schema_id!r}: {len(event.body) - body.tell()} "
                                   "bytes left over")
        return value

    def encode(self, value: Any, schema: str) -> tuple[bytes, str]:
        """``(body, content_type)`` of ``value``: what the official encoder writes (the schema registered once).

        Raises:
            ConfigurationError: No ``group_name`` to register the schema in.
        """
        schema_id = self._ids.get(schema)
        if schema_id is None:
            if self.group_name is None:
                raise ConfigurationError("AvroSchemas(group_name=...) is needed to register schemas for encoding")
            name = json.loads(schema).get("name", "schema")
            namespace = json.loads(schema).get("namespace")
            full = f"{namespace}.{name}" if namespace else name
            schema_id = self._ids[schema] = self.client.register_schema(self.group_name, full, schema, "Avro").id
        out = io.BytesIO()
        _fastavro().schemaless_writer(out, self.fetch(schema_id), value)
        return out.getvalue(), PREFIX + schema_id


@dataclass(frozen=True, slots=True)
class DecodedBatch(EventBatch):
    """A batch with its events' decoded values: ``values[i]`` is event ``i``'s (None when it was undecodable).

    Attributes:
        values: One value per event.
        undecodable: ``(index, reason)`` of the events that could not be decoded (they went to the dead-letter
            handler).

    Example:
        >>> import rxhubs
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> DecodedBatch(ctx, (), values=(), undecodable=()).values
        ()
    """

    values: tuple[Any, ...] = ()
    undecodable: tuple[tuple[int, str], ...] = ()


Handler = Callable[[EventBatch, Exception], Coroutine[Any, Any, None]]


def decode(schemas: Any, *, on_undecodable: Handler | None = None
           ) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Operator: decode each batch's events by their Schema Registry content type; pass a :class:`DecodedBatch`.

    ``schemas`` is an :class:`AvroSchemas` (``avro/binary+<id>``) or a :class:`~rxhubs.schemas.JsonSchemas`
    (``application/json;serialization=Json+<id>``).

    New schema ids are fetched in a thread (then cached). An event that cannot be decoded does not stop its
    partition: it is handed to ``on_undecodable(batch_of_it, UndecodableError(reason))`` (e.g.
    ``hops.dead_letter(dlq)``, which publishes it with the reason) before the batch moves on, and its value is
    None. Built on :func:`rxhubs.operators.process` (in order per partition).

    Marble diagram (``b`` holds one undecodable event)::

        batches:   -a-b-c-|
        decode:    -A-B-C-|      (B's values: None where undecodable)
        dlq:       ---x---       (the undecodable event, with its reason)

    Raises:
        ConfigurationError: At call time, for bad arguments.

    Example:
        >>> import datetime as dt, io, fastavro, reactivex, rxhubs
        >>> schema = '{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}'
        >>> class Registry:  # what azure.schemaregistry.SchemaRegistryClient.get_schema gives, for one id
        ...     def get_schema(self, schema_id):
        ...         return type("Schema", (), {"definition": schema})()
        >>> body = io.BytesIO()
        >>> fastavro.schemaless_writer(body, fastavro.parse_schema(eval(schema)), {"n": 7})
        >>> event = rxhubs.Event(body.getvalue(), 0, "0", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        ...                      system_properties={"content-type": "avro/binary+abc"})
        >>> batch = rxhubs.EventBatch(rxhubs.PartitionContext("ns", "hub", "$Default", "0"), (event,))
        >>> out = []
        >>> from reactivex import operators as ops
        >>> _ = rxhubs.run(reactivex.of(batch).pipe(decode(AvroSchemas(Registry())), ops.do_action(out.append)))
        >>> out[0].values
        ({'n': 7},)
    """
    from rxhubs.operators import process

    if not all(callable(getattr(schemas, name, None)) for name in ("decode_values", "fetch", "schema_id_of")):
        raise ConfigurationError(f"schemas must be rxhubs.schemas.AvroSchemas or JsonSchemas, got "
                                 f"{type(schemas).__name__}")
    if on_undecodable is not None and not callable(on_undecodable):
        raise ConfigurationError("on_undecodable must be an async function of (batch, error)")

    done: dict[int, DecodedBatch] = {}  # hops.process passes its input on: the decoded batch is picked up after it

    async def run(batch: EventBatch) -> None:
        ids = {schemas.schema_id_of(e.system_properties.get("content-type")) for e in batch}
        missing = [i for i in ids if i is not None and i not in schemas._parsed]
        for schema_id in missing:  # blocking registry calls stay off the event loop
            try:
                await asyncio.to_thread(schemas.fetch, schema_id)
            except Exception:
                continue
        values, failures = schemas.decode_values(batch.events)
        for i, exc in failures:
            if on_undecodable is not None:
                await on_undecodable(batch.with_events([batch.events[i]]), exc)
        done[id(batch)] = _decoded(batch, values, [(i, str(exc)) for i, exc in failures])

    def picked(batch: EventBatch) -> EventBatch:
        return done.pop(id(batch), batch)

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        return source.pipe(process(run), ops.map(picked))

    return operator


def _decoded(batch: EventBatch, values: Sequence[Any], failed: list[tuple[int, str]]) -> DecodedBatch:
    return DecodedBatch(batch.context, batch.events, batch.last_enqueued, batch._lease, batch._session,
                        batch._origin, batch._state, tuple(values), tuple(failed))
