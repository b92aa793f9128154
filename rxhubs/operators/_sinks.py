"""Simple sinks for the command line and the demo: console and JSON lines (Spark lives in rxhubs.spark)."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from reactivex import Observable
from reactivex import operators as ops

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs.errors import ConfigurationError


def event_record(batch: EventBatch, event: Event) -> dict[str, Any]:
    """One event as a JSON-able dict, with the Spark connector's field names."""
    try:
        body: Any = event.body.decode("utf-8")
    except UnicodeDecodeError:
        body = {"base64": base64.b64encode(event.body).decode("ascii")}
    return {
        "partition": batch.partition_id,
        "sequenceNumber": event.sequence_number,
        "offset": event.offset,
        "enqueuedTime": event.enqueued_time.isoformat(),
        "partitionKey": event.partition_key,
        "body": body,
    }


Operator = Callable[[Observable[EventBatch]], Observable[EventBatch]]


def jsonl_sink(path: str | os.PathLike[str], *, fsync: bool = True) -> Operator:
    """Operator: append every event as a JSON line to ``path``, durably, then pass the batch on.

    Marble diagram::

        batches: -a--b--|
        file:     a  ab         (lines written and flushed before each batch moves on)
        output:  -a--b--|

    Raises:
        ConfigurationError: At call time, if the file cannot be opened for appending.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = target.open("a", encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot write to {target}: {exc.strerror or exc}") from exc

    def write(batch: EventBatch) -> None:
        if not batch.events:
            return
        handle.write("".join(json.dumps(event_record(batch, e)) + "\n" for e in batch.events))
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())

    return ops.do_action(write, on_completed=handle.close, on_error=lambda _: handle.close())


def console_sink(stream: IO[str] | None = None) -> Operator:
    """Operator: print every event as a JSON line to stdout, then pass the batch on.

    Marble diagram::

        batches: -a--b--|
        output:  -a--b--|
    """
    out = stream or sys.stdout

    def write(batch: EventBatch) -> None:
        for event in batch.events:
            print(json.dumps(event_record(batch, event)), file=out)
        out.flush()

    return ops.do_action(write)
