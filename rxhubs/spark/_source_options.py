"""The options of the Structured Streaming source: its own names and the Scala connector's, checked once.

``spark.readStream.format("eventhubs").option(...)`` options arrive as strings; :class:`_Options` turns them into
typed values (the connection string kept only to build a hub, and redacted from every message), accepting the
option names of the Scala Event Hubs connector where they mean the same thing (:data:`SCALA_ALIASES`, see
``docs/spark.md``), and its JSON starting positions.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rxhubs._models import Position
from rxhubs._models._events import is_offset
from rxhubs.errors import ConfigurationError
from rxhubs.spark._connection import CONNECTION_KEYS, Connection

if TYPE_CHECKING:
    from rxhubs.transport._hub import EventHub

__all__ = ["SCALA_ALIASES", "Start", "_Options"]

_DEFAULTS = {"consumergroup": "$Default", "startingposition": "latest", "prefetch": "1000", "receivetimeout": "60",
             "failondataloss": "true"}
_KNOWN = {
    *CONNECTION_KEYS,
    "consumergroup",
    "startingposition",
    "checkpointstore",
    "maxeventspertrigger",
    "minpartitions",
    "prefetch",
    "receivetimeout",
    "failondataloss",
    "path",
    "capturepath",
    "capturenamespace",
    "captureconnectionstring",
}
#: Options of a batch read only (``spark.read``): where it ends.
BATCH_KEYS = frozenset({"endingposition", "eventhubs.endingposition", "eventhubs.endingpositions"})
#: Option names of the Scala connector (azure-event-hubs-spark) that mean the same here -> this source's own.
#: ``eventhubs.startingPosition(s)`` are read separately: their values are the connector's JSON positions.
SCALA_ALIASES = {
    "eventhubs.connectionstring": "connectionstring",
    "eventhubs.consumergroup": "consumergroup",
    "eventhubs.prefetchcount": "prefetch",
    "eventhubs.receivertimeout": "receivetimeout",
}
_SCALA_POSITIONS = ("eventhubs.startingposition", "eventhubs.startingpositions")
_ISO_DURATION = re.compile(r"PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?", re.IGNORECASE)


#: Where a partition starts when the query has no Spark checkpoint: ``"earliest"``, ``"latest"``, the next
#: sequence number to read, or a Position (an offset or an enqueued time, from the Scala connector's options)
#: that the driver translates into a sequence number when the query starts.
Start = int | str | Position


class _Options:
    """The source's options, validated; ``repr`` never shows the connection string."""

    def __init__(self, raw: Mapping[str, str], *, batch: bool = False) -> None:
        opts = _canonical({str(k).lower(): str(v) for k, v in raw.items()})
        scala = {k: opts.pop(k) for k in _SCALA_POSITIONS if k in opts}
        self.ending = {k: opts.pop(k) for k in BATCH_KEYS if k in opts}
        if self.ending and not batch:
            raise ConfigurationError(
                f"{sorted(self.ending)[0]} ends a batch read (spark.read); a stream has no end: use "
                "trigger(availableNow=True) to read what is in the hub now and stop"
            )
        unknown = sorted(k for k in set(opts) - _KNOWN if not k.startswith("credentialfactory."))
        if unknown:
            raise ConfigurationError(
                f"unknown eventhubs source option(s) {', '.join(map(repr, unknown))}; known: connectionString, "
                "eventHubName, fullyQualifiedNamespace, credential, credentialFactory, consumerGroup, "
                "startingPosition, endingPosition (batch), checkpointStore, maxEventsPerTrigger, minPartitions, "
                "prefetch, receiveTimeout, failOnDataLoss, capturePath, captureNamespace, captureConnectionString "
                "(and the Scala connector's eventhubs.connectionString, "
                "eventhubs.consumerGroup, eventhubs.startingPosition(s), eventhubs.endingPosition(s), "
                "eventhubs.prefetchCount, eventhubs.receiverTimeout)"
            )
        if scala and "startingposition" in opts:
            raise ConfigurationError(
                "give startingPosition or the Scala connector's eventhubs.startingPosition(s), not both"
            )
        opts = {**_DEFAULTS, **({"startingposition": "earliest"} if batch else {}), **opts}
        self.connection = Connection(opts)
        self.connection_string = self.connection.connection_string
        self.namespace = self.connection.namespace
        self.eventhub_name = self.connection.eventhub_name
        self.consumer_group = opts["consumergroup"]
        self.checkpoint_store = opts.get("checkpointstore") or None
        self.max_events = _positive_int(opts, "maxeventspertrigger", "maxEventsPerTrigger", None)
        self.min_partitions = _positive_int(opts, "minpartitions", "minPartitions", None)
        self.prefetch = _positive_int(opts, "prefetch", "prefetch", 1000)
        self.receive_timeout = _seconds(opts["receivetimeout"])
        self.fail_on_data_loss = _flag(opts["failondataloss"], "failOnDataLoss")
        #: Event Hubs Capture files of the hub: the range before the retention is read from them (docs/history.md)
        self.capture_path = opts.get("capturepath") or None
        self.capture_namespace = opts.get("capturenamespace") or None
        self._capture_connection_string = opts.get("captureconnectionstring") or None
        if self.capture_path is None and (self.capture_namespace or self._capture_connection_string):
            raise ConfigurationError("captureNamespace and captureConnectionString go with capturePath")
        self.default_start: Start
        self.starting_map: dict[str, Start]
        if scala:
            self.default_start, self.starting_map = _scala_starts(scala, self.eventhub_name, batch)
        else:
            self.default_start, self.starting_map = _starts(opts["startingposition"].strip())

    def __repr__(self) -> str:
        return f"_Options(namespace={self.namespace!r}, eventhub_name={self.eventhub_name!r})"

    def start_of(self, partition_id: str) -> Start:
        """Where ``partition_id`` starts without a Spark checkpoint or a stored checkpoint."""
        return self.starting_map.get(partition_id, self.default_start)

    def hub(self, partition_ids: tuple[str, ...] = (), *, management_link: bool = False) -> EventHub:
        """A new hub (close it with :func:`rxhubs.spark._connection.close_hub`); see :meth:`Connection.hub`.

        With ``capturePath``, a :class:`~rxhubs.sources.BackfillHub`: the range before the hub's retention is read
        from the Capture files, the rest from the hub (same rows, same columns).
        """
        hub = self.connection.hub(partition_ids, management_link=management_link)
        if self.capture_path is None:
            return hub
        from rxhubs.sources import BackfillHub, Capture

        capture = Capture(self.capture_path, namespace=self.capture_namespace,
                          connection_string=self._capture_connection_string, patience=self.receive_timeout,
                          poll_interval=1.0)
        return BackfillHub(hub, capture)  # type: ignore[return-value]  # the Hub protocol EventHub implements

    def redact(self, text: str) -> str:
        return self.connection.redact(text)

    def check_secret(self, exc: BaseException) -> None:
        """Raise a redacted :class:`RxHubsError` instead of ``exc`` if its text shows a secret.

        rxhubs' own errors never do; a third-party error might.
        """
        self.connection.check_secret(exc)


def _canonical(opts: dict[str, str]) -> dict[str, str]:
    """The Scala connector's names replaced by this source's (same meaning); the same setting twice is an error."""
    out = {k: v for k, v in opts.items() if k not in SCALA_ALIASES}
    for scala, own in SCALA_ALIASES.items():
        if scala in opts:
            if own in out and out[own] != opts[scala]:
                raise ConfigurationError(f"option {own!r} is given twice, also as the Scala connector's {scala!r}")
            out[own] = opts[scala]
    return out


def _seconds(text: str) -> float:
    """``receiveTimeout`` in seconds: a number, or an ISO 8601 duration as the Scala connector takes (``PT60S``)."""
    value: float | None
    try:
        value = float(text)
    except ValueError:
        match = _ISO_DURATION.fullmatch(text.strip())
        value = None
        if match and any(match.groups()):
            hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            value = hours * 3600 + minutes * 60 + seconds
    if value is None or not value > 0:
        raise ConfigurationError(f"receiveTimeout must be seconds (> 0) or a duration like PT60S, got {text!r}")
    return value


def _flag(text: str, name: str) -> bool:
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise ConfigurationError(f"{name} must be true or false, got {text!r}")


def _positive_int(opts: Mapping[str, str], key: str, name: str, default: int | None) -> int | None:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {opts[key]!r}")
    return value


def _starts(text: str) -> tuple[Start, dict[str, Start]]:
    """``startingPosition``: earliest or latest for all, or a JSON map (partitions it leaves out: earliest)."""
    return sequence_map(text, "startingPosition", "next sequence number", "earliest")


def sequence_map(text: str, option: str, meaning: str, default: Start) -> tuple[Start, dict[str, Start]]:
    """``earliest`` or ``latest`` for every partition, or a JSON object of partition id -> sequence number.

    The own form of ``startingPosition`` and of the batch read's ``endingPosition``; the partitions a JSON object
    leaves out get ``default``.

    Example:
        >>> sequence_map('{"0": 5, "1": "latest"}', "startingPosition", "next sequence number", "earliest")
        ('earliest', {'0': 5, '1': 'latest'})
    """
    if text.lower() in ("earliest", "latest"):
        return text.lower(), {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{option} must be earliest, latest or a JSON object of partition id -> {meaning}")
    out: dict[str, Start] = {}
    for key, seq in value.items():
        if isinstance(seq, str) and seq.lower() in ("earliest", "latest"):
            out[str(key)] = seq.lower()
        elif isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            out[str(key)] = seq
        else:
            raise ConfigurationError(
                f"{option} for partition {key!r} must be a sequence number >= 0, earliest or latest"
            )
    return default, out


def _scala_starts(
    options: Mapping[str, str], eventhub_name: str, batch: bool = False
) -> tuple[Start, dict[str, Start]]:
    """The Scala connector's ``eventhubs.startingPosition`` (all partitions) and ``...Positions`` (per partition).

    Values are its JSON ``EventPosition``s; keys of ``startingPositions`` its JSON ``NameAndPartition``
    (``{"ehName": "hub", "partitionId": 0}``) or a plain partition id. A partition in neither starts at ``latest``
    in a stream, as in the connector (the end of the stream), and at ``earliest`` in a batch read.
    """
    default: Start = "earliest" if batch else "latest"
    if "eventhubs.startingposition" in options:
        default = _event_position(_json(options["eventhubs.startingposition"], "eventhubs.startingPosition"),
                                  "eventhubs.startingPosition")
    starts: dict[str, Start] = {}
    if "eventhubs.startingpositions" in options:
        per = _json(options["eventhubs.startingpositions"], "eventhubs.startingPositions")
        if not isinstance(per, dict):
            raise ConfigurationError("eventhubs.startingPositions must be a JSON object of partition -> EventPosition")
        for key, position in per.items():
            partition = _partition_key(key, eventhub_name)
            starts[partition] = _event_position(position, f"eventhubs.startingPositions[{partition!r}]")
    return default, starts


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be JSON, as the Scala connector's EventPosition") from None


def _partition_key(key: str, eventhub_name: str) -> str:
    """A ``NameAndPartition`` JSON key (``{"ehName": "hub", "partitionId": 0}``) or a plain partition id."""
    try:
        value = json.loads(key)
    except ValueError:
        value = key
    if isinstance(value, dict):
        name, partition = value.get("ehName"), value.get("partitionId")
        if name is not None and str(name).lower() != eventhub_name.lower():
            raise ConfigurationError(
                f"eventhubs.startingPositions names event hub {name!r}, but this query reads {eventhub_name!r}"
            )
        value = partition
    if isinstance(value, bool) or not isinstance(value, int | str) or str(value).strip() == "":
        raise ConfigurationError(f"eventhubs.startingPositions: {key!r} names no partition")
    return str(value)


def _event_position(position: Any, name: str) -> Start:
    """A Scala connector ``EventPosition`` (``offset``, ``seqNo``, ``enqueuedTime``, ``isInclusive``) as a start.

    The start of the stream (``offset`` ``"-1"``), its end (``"@latest"``) and a sequence number (``seqNo``,
    whatever ``isInclusive`` says: the connector's ``EventHubsClient.translate`` takes ``position.seqNo`` as it
    is) are used as they are. A numeric ``offset`` or an ``enqueuedTime``
    (``"2026-03-01T12:00:00.000Z"``; naive means UTC) becomes a :class:`~rxhubs.Position` that the driver
    translates into the sequence number of the first event there when the query starts, as the connector does.
    """
    if not isinstance(position, dict):
        raise ConfigurationError(f"{name} must be an EventPosition JSON object (offset, seqNo, enqueuedTime)")
    offset, seq, enqueued = position.get("offset"), position.get("seqNo", -1), position.get("enqueuedTime")
    inclusive = position.get("isInclusive", True) is not False
    given = [k for k, v in (("offset", offset), ("seqNo", None if seq in (None, -1) else seq),
                            ("enqueuedTime", enqueued)) if v is not None]
    if len(given) > 1:
        raise ConfigurationError(f"{name}: give one of offset, seqNo and enqueuedTime, not {' and '.join(given)}")
    if enqueued is not None:
        try:
            when = _dt.datetime.fromisoformat(str(enqueued))
        except ValueError:
            raise ConfigurationError(
                f"{name}: enqueuedTime must be an ISO 8601 time like 2026-03-01T12:00:00.000Z, got {enqueued!r}"
            ) from None
        when = when if when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)
        return Position.from_enqueued_time(when, inclusive=inclusive)
    if offset is not None:
        if str(offset) == "-1":
            return "earliest"
        if str(offset) == "@latest":
            return "latest"
        if not is_offset(str(offset)):  # a number, or a geo-replicated namespace's offset string
            raise ConfigurationError(f'{name}: offset must be "-1", "@latest" or an offset of the partition (a'
                                     f' number, or a geo-replicated string), got {offset!r}')
        return Position.from_offset(str(offset), inclusive=inclusive)
    if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
        return seq  # (isInclusive is ignored for seqNo, as the connector's translate ignores it)
    raise ConfigurationError(f"{name}: seqNo must be a sequence number >= 0, got {seq!r}")
