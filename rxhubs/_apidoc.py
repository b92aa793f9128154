"""Generate docs/api.md from the public names' signatures and docstrings.

``python -m rxhubs._apidoc > docs/api.md``; a test checks the file is current.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from typing import Any

SECTIONS: list[tuple[str, str, list[str]]] = [
    ("Models", "rxhubs", [
        "Event", "EventBatch", "PartitionContext", "Position", "Checkpoint", "Ownership", "CloseReason",
        "ErrorContext", "Ack", "PartitionProperties", "LastEnqueuedEventProperties", "EventHubProperties",
    ]),
    ("Transports", "rxhubs", ["EventHub", "Hub", "PartitionReceiver"]),
    ("Streams", "rxhubs", [
        "partition_batches", "partitions", "consume", "PartitionStream", "run", "arun", "Shutdown", "Backoff",
    ]),
    ("History (Capture, then live)", "rxhubs.sources", ["Capture", "BackfillHub"]),
    ("Schemas (Azure Schema Registry)", "rxhubs.schemas", ["AvroSchemas", "JsonSchemas", "decode",
                                                           "DecodedBatch", "UndecodableError", "with_decoded",
                                                           "StaticTokenCredential"]),
    ("Operators", "rxhubs.operators", [
        "process", "checkpoint", "publish", "dead_letter", "Publisher", "OutgoingEvent", "window", "scan_state",
        "exactly_once", "TransactionalSink", "CommitResult", "read_position",
    ]),
    ("Windows and state", "rxhubs.windows", [
        "tumbling", "hopping", "session", "count", "sum", "min", "max", "fold", "EnqueuedTime", "EventTime",
        "CaughtUp", "WindowResult", "WindowBatch", "ScanBatch",
    ]),
    ("Processor", "rxhubs", ["EventProcessor", "PartitionProcessor"]),
    ("Workers", "rxhubs", ["run_workers", "WorkerContext", "WorkersSummary", "WorkerReport"]),
    ("Stores", "rxhubs.stores", [
        "CheckpointStore", "InMemoryCheckpointStore", "SqliteCheckpointStore", "BlobCheckpointStore",
        "SdkCheckpointStore", "as_checkpoint_store", "from_url",
    ]),
    ("Spark", "rxhubs.spark", [
        "write", "to_dataframe", "local_session", "get_or_create_session", "SCHEMA", "register_source",
    ]),
    ("Tables (exactly once)", "rxhubs.tables",
     ["DeltaSink", "SqlSink", "SqliteSink", "sqlite", "postgresql", "InMemoryTable", "sink_for", "read_delta"]),
    ("Operating", "rxhubs.operate", ["reset_positions", "ResetPlan", "ResetRow", "LagServer", "group_lag",
                                     "PartitionLag"]),
    ("OpenTelemetry", "rxhubs.otel", ["instrument", "uninstrument", "is_instrumented", "traced"]),
    ("Emulator", "rxhubs.emulator", ["Emulator", "BackgroundEmulator", "EmulatorFaults", "LinkRecord",
                                     "LocalIdentity", "LocalIdentityCredential", "credential_from_file"]),
    ("Testing", "rxhubs.testing", [
        "InMemoryEventHub", "marble_test", "MarbleTest", "symbols", "to_symbols", "Peer", "MarbleSink", "sleep",
        "Signal",
    ]),
    ("Errors", "rxhubs.errors", [
        "RxHubsError", "ConfigurationError", "NotFoundError", "AuthenticationError", "TransportError",
        "ReceiverClosedError", "OwnershipLostError", "QuotaExceededError", "StoreError", "OwnershipConflictError",
        "CorruptRecordError", "CheckpointOutOfRangeError", "SinkError", "CaptureGapError", "EmulatorError",
    ]),
]


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    paragraphs = doc.split("\n\n")
    return " ".join(paragraphs[0].split()) if paragraphs else ""


def _signature(name: str, obj: Any) -> str:
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return name
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name.startswith("_") or p.name == "self" or p.name == "cls":
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
            text = f"*{p.name}"
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        else:
            text = p.name
        if p.annotation is not p.empty:
            text += f": {p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}" if not callable(p.default) else " = ..."
        parts.append(text)
    result = f"{name}({', '.join(parts)})"
    ret = sig.return_annotation
    if ret is not sig.empty and not inspect.isclass(obj):
        result += f" -> {ret if isinstance(ret, str) else inspect.formatannotation(ret)}"
    return result


def _members(obj: Any) -> list[str]:
    if not inspect.isclass(obj):
        return []
    if issubclass(obj, enum.Enum):
        return [f"  - `{m.name}`" for m in obj]
    lines = []
    # a class's own members, and those of its private bases (a class split by concern, as EventHub is)
    own = [base for base in reversed(obj.__mro__) if base is obj or base.__name__.startswith("_")]
    for name, member in sorted({k: v for base in own for k, v in vars(base).items()}.items()):
        if name.startswith("_"):
            continue
        target = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        if isinstance(member, property):
            lines.append(f"  - `{name}` (property): {_summary(member)}")
        elif inspect.isfunction(target):
            lines.append(f"  - `{_signature(name, target)}`: {_summary(target)}")
    return lines


def render() -> str:
    """The whole reference as Markdown."""
    out = [
        "# API reference",
        "",
        "Generated from the code by `python -m rxhubs._apidoc` (a test keeps it current). Every public name has a",
        "docstring with an example; `help(rxhubs.consume)` shows it in full.",
        "",
    ]
    for title, module_name, names in SECTIONS:
        module = importlib.import_module(module_name)
        out += [f"## {title} (`{module_name}`)", ""]
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or callable(obj):
                out.append(f"### `{module_name}.{_signature(name, obj)}`")
            else:
                out.append(f"### `{module_name}.{name}`")
            out += ["", _summary(obj), ""]
            members = _members(obj)
            if members:
                out += [*members, ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
