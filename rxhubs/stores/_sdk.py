"""Adapt any store implementing the Azure SDK's own ``CheckpointStore`` interface (sync or aio) to rxhubs."""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any, cast, get_type_hints

from rxhubs._models import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, RxHubsError, StoreError
from rxhubs.stores._common import VERBS, describe, logger, normalize_etag, parse_offset, parse_sequence_number, redact
from rxhubs.stores._contract import CheckpointStore

__all__ = ["SdkCheckpointStore", "as_checkpoint_store"]


class SdkCheckpointStore(CheckpointStore):
    """An rxhubs store over an object with the Azure SDK's ``CheckpointStore`` interface (dict records).

    Works with ``azure.eventhub.extensions.checkpointstoreblobaio.BlobCheckpointStore`` and its sync twin, and
    with any custom store written for ``azure.eventhub.EventProcessor``: async methods are awaited, sync ones
    run in a worker thread (``asyncio.to_thread``) so they never block the event loop.

    Records are converted both ways (``Ownership``/``Checkpoint`` <-> dicts with the keys
    ``fully_qualified_namespace``, ``eventhub_name``, ``consumer_group``, ``partition_id``, ``owner_id``,
    ``last_modified_time``, ``etag``, ``offset``, ``sequence_number``); ``last_modified_time`` may come back as
    epoch seconds or a datetime; etags are returned without quotes.

    What the adapter adds to the SDK interface to keep the rxhubs contract:

    * a returned claim counts as won only if it carries an etag different from the one claimed: the official
      blob store returns a claim unchanged when the storage call failed for a reason other than a conflict,
      which would otherwise look like a win;
    * malformed records (not a mapping, no partition id, no owner id, a non-numeric sequence number or
      offset) are logged and treated as released (ownership) or absent (checkpoints);
    * any exception from the wrapped store becomes a retriable :class:`~rxhubs.errors.StoreError`, chained,
      with secrets redacted from its message.

    Args:
        sdk_store: The object to wrap; :meth:`close` closes it too (if it has ``close``).

    Raises:
        ConfigurationError: If a verb of the interface is missing.

    Example:
        >>> from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore  # doctest: +SKIP
        >>> official = BlobCheckpointStore.from_connection_string(conn_str, "checkpoints")  # doctest: +SKIP
        >>> store = SdkCheckpointStore(official)  # doctest: +SKIP
        >>> await store.list_checkpoints("myns.servicebus.windows.net", "telemetry", "$Default")  # doctest: +SKIP
        [Checkpoint(fully_qualified_namespace='myns.servicebus.windows.net', ...)]
    """

    def __init__(self, sdk_store: Any) -> None:
        missing = [verb for verb in VERBS if not callable(getattr(sdk_store, verb, None))]
        if missing:
            raise ConfigurationError(
                f"{type(sdk_store).__name__} does not implement the checkpoint store interface: "
                f"missing {', '.join(missing)}"
            )
        self._sdk = sdk_store

    @property
    def sdk_store(self) -> Any:
        """The wrapped object."""
        return self._sdk

    async def _call(self, verb: str, *args: Any) -> Any:
        method = getattr(self._sdk, verb)
        try:
            if inspect.iscoroutinefunction(method):
                return await method(*args)
            result = await asyncio.to_thread(method, *args)
            if inspect.isawaitable(result):
                result = await result
            return result
        except RxHubsError:
            raise
        except Exception as exc:
            text = redact(str(exc)).splitlines()
            raise StoreError(
                f"{type(self._sdk).__name__}.{verb} failed: {type(exc).__name__}"
                + (f": {text[0]}" if text and text[0] else "")
            ) from exc

    # -- the contract ----------------------------------------------------------------------------------

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        """Every ownership record, converted; malformed ones come back released."""
        records = await self._call("list_ownership", fully_qualified_namespace, eventhub_name, consumer_group)
        result: list[Ownership] = []
        for record in records or ():
            ownership = self._to_ownership(record, fully_qualified_namespace, eventhub_name, consumer_group)
            if ownership is not None:
                result.append(ownership)
        return result

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Claim through the wrapped store; return the claims it reports won with a new etag."""
        claims = list(ownerships)
        if not claims:
            return []
        requested = {c.partition_id.lower(): c for c in claims}
        records = await self._call("claim_ownership", [_ownership_dict(c) for c in claims])
        won: list[Ownership] = []
        for record in records or ():
            claim = requested.get(str(record.get("partition_id", "")).lower()) if isinstance(record, Mapping) else None
            if claim is None:
                logger.warning(
                    "%s.claim_ownership returned a record it was not asked for: %s",
                    type(self._sdk).__name__,
                    describe(record),
                )
                continue
            ownership = self._to_ownership(
                record, claim.fully_qualified_namespace, claim.eventhub_name, claim.consumer_group
            )
            if ownership is None or ownership.etag is None or ownership.etag == normalize_etag(claim.etag):
                logger.info(
                    "%s: claim of partition %r returned without a new etag; treating it as lost",
                    type(self._sdk).__name__,
                    claim.partition_id,
                )
                continue
            won.append(ownership)
        return won

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write the checkpoint through the wrapped store."""
        await self._call("update_checkpoint", _checkpoint_dict(checkpoint))

    async def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        """Write several checkpoints concurrently; raises the first failure after all ran."""
        results = await asyncio.gather(*(self.update_checkpoint(c) for c in checkpoints), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """Every checkpoint, converted; malformed ones are logged and skipped."""
        records = await self._call("list_checkpoints", fully_qualified_namespace, eventhub_name, consumer_group)
        result: list[Checkpoint] = []
        for record in records or ():
            partition_id = record.get("partition_id") if isinstance(record, Mapping) else None
            number = parse_sequence_number(record.get("sequence_number")) if isinstance(record, Mapping) else None
            raw_offset = record.get("offset") if isinstance(record, Mapping) else _MISSING
            # The official blob store writes and lists a missing offset as str(None): read "None" as no offset.
            valid, offset = parse_offset(None if raw_offset == "None" else raw_offset)
            if not isinstance(partition_id, str) or not partition_id or number is None or not valid:
                logger.warning(
                    "%s: ignoring a malformed checkpoint record %s", type(self._sdk).__name__, describe(record)
                )
                continue
            result.append(
                Checkpoint(fully_qualified_namespace, eventhub_name, consumer_group, partition_id, offset, number)
            )
        return result

    def _to_ownership(
        self, record: object, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> Ownership | None:
        name = type(self._sdk).__name__
        if not isinstance(record, Mapping) or not isinstance(record.get("partition_id"), str | int):
            logger.warning("%s: ignoring a malformed ownership record %s", name, describe(record))
            return None
        partition_id = str(record["partition_id"])
        owner_id = record.get("owner_id", _MISSING)
        if owner_id is None:
            owner_id = ""  # the official blob store lists a released owner (empty metadata) as None
        elif not isinstance(owner_id, str):
            logger.warning(
                "%s: ownership of partition %r has owner id %s; treating it as released",
                name,
                partition_id,
                describe(owner_id),
            )
            owner_id = ""
        modified = _epoch_seconds(record.get("last_modified_time"))
        if modified is None and record.get("last_modified_time") is not None:
            logger.warning(
                "%s: ownership of partition %r has last-modified time %s; treating it as released",
                name,
                partition_id,
                describe(record.get("last_modified_time")),
            )
            owner_id, modified = "", 0.0
        return Ownership(
            fully_qualified_namespace,
            eventhub_name,
            consumer_group,
            partition_id,
            owner_id,
            modified,
            normalize_etag(record.get("etag")) or None,
        )

    # -- life cycle ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the wrapped store if it has ``close()`` (sync or async)."""
        close = getattr(self._sdk, "close", None)
        if callable(close):
            if inspect.iscoroutinefunction(close):
                await close()
            else:
                result = await asyncio.to_thread(close)
                if inspect.isawaitable(result):
                    await result

    async def __aenter__(self) -> SdkCheckpointStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SdkCheckpointStore({type(self._sdk).__module__}.{type(self._sdk).__qualname__})"


_MISSING: Any = object()


def _ownership_dict(o: Ownership) -> dict[str, Any]:
    return {
        "fully_qualified_namespace": o.fully_qualified_namespace,
        "eventhub_name": o.eventhub_name,
        "consumer_group": o.consumer_group,
        "partition_id": o.partition_id,
        "owner_id": o.owner_id,
        "last_modified_time": o.last_modified_time,
        "etag": o.etag,
    }


def _checkpoint_dict(c: Checkpoint) -> dict[str, Any]:
    return {
        "fully_qualified_namespace": c.fully_qualified_namespace,
        "eventhub_name": c.eventhub_name,
        "consumer_group": c.consumer_group,
        "partition_id": c.partition_id,
        "offset": c.offset,
        "sequence_number": c.sequence_number,
    }


def _epoch_seconds(value: object) -> float | None:
    if isinstance(value, _dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=_dt.UTC)).timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _sdk_interfaces() -> tuple[type, ...]:
    try:
        from azure.eventhub import CheckpointStore as SyncSdkStore
        from azure.eventhub.aio import CheckpointStore as AsyncSdkStore
    except ImportError:  # pragma: no cover - azure-eventhub is a dependency
        return ()
    return (SyncSdkStore, AsyncSdkStore)


def as_checkpoint_store(obj: object) -> CheckpointStore:
    """``obj`` if it keeps the rxhubs contract, else ``obj`` wrapped in :class:`SdkCheckpointStore`.

    How it decides, in order (never by trying a call):

    1. an instance of a class that subclasses :class:`~rxhubs.stores.CheckpointStore` explicitly (every rxhubs
       store does; subclass it in your own typed store) is returned as is;
    2. an instance of the SDK's ``azure.eventhub.CheckpointStore`` or ``azure.eventhub.aio.CheckpointStore``
       (the official blob stores included) is wrapped;
    3. otherwise the annotation of ``update_checkpoint``'s parameter decides: ``Checkpoint`` -> as is, a dict
       or mapping -> wrapped.

    Args:
        obj: A store.

    Raises:
        ConfigurationError: If ``obj`` lacks a verb, or it cannot tell (no annotations): subclass
            ``rxhubs.stores.CheckpointStore`` or wrap it yourself with ``SdkCheckpointStore(obj)``.

    Example:
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> store = InMemoryCheckpointStore()
        >>> as_checkpoint_store(store) is store
        True
        >>> class LegacyStore:
        ...     async def list_ownership(self, namespace, hub, group): return []
        ...     async def claim_ownership(self, ownership_list): return []
        ...     async def update_checkpoint(self, checkpoint: dict) -> None: ...
        ...     async def list_checkpoints(self, namespace, hub, group): return []
        >>> as_checkpoint_store(LegacyStore())  # doctest: +ELLIPSIS
        SdkCheckpointStore(...LegacyStore)
    """
    if isinstance(obj, CheckpointStore) and CheckpointStore in type(obj).__mro__:
        return obj
    interfaces = _sdk_interfaces()
    if interfaces and isinstance(obj, interfaces):
        return SdkCheckpointStore(obj)
    missing = [verb for verb in VERBS if not callable(getattr(obj, verb, None))]
    if missing:
        raise ConfigurationError(f"not a checkpoint store: {type(obj).__name__} has no {', '.join(missing)}")
    kind = _record_kind(cast(Any, obj).update_checkpoint)
    if kind == "typed":
        return obj  # type: ignore[return-value]
    if kind == "dict":
        return SdkCheckpointStore(obj)
    raise ConfigurationError(
        f"cannot tell whether {type(obj).__name__} takes rxhubs records or the Azure SDK's dicts: subclass "
        "rxhubs.stores.CheckpointStore, annotate update_checkpoint's parameter, or pass SdkCheckpointStore(obj)"
    )


def _record_kind(method: Any) -> str | None:
    try:
        hints = get_type_hints(method)
    except Exception:  # unresolvable annotations: fall back to the raw ones
        hints = dict(getattr(method, "__annotations__", {}))
    hints.pop("return", None)
    try:
        names = [p for p in inspect.signature(method).parameters if p not in ("args", "kwargs")]
    except (TypeError, ValueError):
        return None
    if not names or names[0] not in hints:
        return None
    hint = hints[names[0]]
    text = hint if isinstance(hint, str) else getattr(hint, "__name__", None) or repr(hint)
    origin = getattr(hint, "__origin__", None)
    if hint is Checkpoint or text == "Checkpoint" or text.endswith(".Checkpoint"):
        return "typed"
    if hint in (dict, Mapping) or origin in (dict, Mapping) or str(text).lower().startswith(("dict", "mapping")):
        return "dict"
    if "Dict" in str(text) or "Mapping" in str(text):
        return "dict"
    return None
