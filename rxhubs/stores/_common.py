"""Helpers shared by the stores: keys, record validation, etags and secret redaction (private)."""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from rxhubs._models import Checkpoint, Ownership
from rxhubs._models._events import is_offset
from rxhubs.errors import OwnershipLostError

__all__ = [
    "open_sqlite",
    "FENCED_VERBS",
    "VERBS",
    "Key",
    "key_of",
    "logger",
    "normalize_etag",
    "parse_offset",
    "parse_sequence_number",
    "redact",
]

#: The logger every store reports malformed records and partial failures to.
logger = logging.getLogger("rxhubs.stores")

#: The four verbs of the contract.
VERBS = ("list_ownership", "claim_ownership", "update_checkpoint", "list_checkpoints")

#: The optional verbs of a fenced store (``FencedCheckpointStore``).
FENCED_VERBS = ("fence", "update_checkpoint_fenced")

Key = tuple[str, str, str]


def key_of(fully_qualified_namespace: str, eventhub_name: str, consumer_group: str) -> Key:
    """The case-insensitive key of a consumer group (the official blob layout lower-cases names)."""
    return (fully_qualified_namespace.lower(), eventhub_name.lower(), consumer_group.lower())


def record_key(record: Ownership | Checkpoint) -> Key:
    return key_of(record.fully_qualified_namespace, record.eventhub_name, record.consumer_group)


def lost(ownership: Ownership, why: str) -> OwnershipLostError:
    """The error a fenced store raises when ``ownership``'s period is over."""
    return OwnershipLostError(
        f"partition {ownership.partition_id!r} is not {ownership.owner_id!r}'s any more ({why}): "
        "the checkpoint was not written"
    )


def normalize_etag(etag: object) -> str | None:
    """An etag without its quotes (and weak prefix): listings and write responses then compare equal."""
    if etag is None:
        return None
    text = str(etag).strip()
    if text.startswith("W/"):
        text = text[2:]
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    return text


_DIGITS = re.compile(r"-?[0-9]+")


def parse_sequence_number(value: object) -> int | None:
    """An int from an int or a string of digits; None for anything else (bools, floats, garbage)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return None


def parse_offset(value: object) -> tuple[bool, str | None]:
    """``(valid, offset)``: an offset string (ints accepted), None when absent or empty; invalid otherwise.

    Offsets are opaque (a geo-replicated namespace's are not numbers, see :func:`rxhubs._models._events.is_offset`): any
    string that can be an offset is kept as written.

    Example:
        >>> parse_offset("4096"), parse_offset("1:0:4096"), parse_offset(""), parse_offset("x'1"), parse_offset(True)
        ((True, '4096'), (True, '1:0:4096'), (True, None), (False, None), (False, None))
    """
    if value is None:
        return True, None
    if isinstance(value, bool):
        return False, None
    if isinstance(value, int):
        return True, str(value)
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return True, None
        if is_offset(text):
            return True, text
    return False, None


_SECRET_PATTERNS = (
    re.compile(r"(?i)(AccountKey|SharedAccessKey|SharedAccessSignature|sig|signature)=([^;&\s'\"]+)"),
    re.compile(r"(?i)(Authorization:\s*)(\S+(?:\s+\S+)?)"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with known secrets and anything shaped like a key, SAS signature or auth header masked."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{'' if m.group(1).endswith(' ') else '='}***", text)
    return text


def describe(value: Any) -> str:
    """A short, safe description of a stored value for log lines."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def open_sqlite(
    path: str, timeout: float, setup: Callable[[sqlite3.Connection], None] | None = None
) -> sqlite3.Connection:
    """A connection to ``path`` for use from several processes: busy timeout, WAL (files), ``synchronous=NORMAL``.

    ``setup`` runs once the pragmas are set (a schema, say). Changing the journal mode does not wait on the busy
    handler, so a database locked while others set up is tried again until ``timeout`` passed; the connection is
    closed if it cannot be set up.

    Example:
        >>> open_sqlite(":memory:", 1.0).execute("PRAGMA synchronous").fetchone()
        (1,)
    """
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
                if path != ":memory:":
                    connection.execute("PRAGMA journal_mode = WAL")
                connection.execute("PRAGMA synchronous = NORMAL")
                if setup is not None:
                    setup(connection)
                return connection
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    except BaseException:
        connection.close()
        raise
