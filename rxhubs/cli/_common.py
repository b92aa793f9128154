"""Options and helpers shared by the commands that talk to a hub and a store."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from rxhubs.errors import ConfigurationError

_log = logging.getLogger("rxhubs.cli")

HUB_VARIABLE = "EVENTHUB_CONNECTION_STRING"
STORAGE_VARIABLE = "AZURE_STORAGE_CONNECTION_STRING"


def add_hub_options(parser: argparse.ArgumentParser) -> None:
    """--connection-string, --eventhub, --consumer-group, --store, --storage-connection-string."""
    parser.add_argument(
        "-c", "--connection-string",
        help=f"Event Hubs connection string (default: ${HUB_VARIABLE}); prefer the variable, argv is visible to ps",
    )
    parser.add_argument("--eventhub", help="event hub name (if the connection string has no EntityPath)")
    parser.add_argument("-g", "--consumer-group", default="$Default", help="consumer group (default $Default)")
    parser.add_argument(
        "--store", default="sqlite:///.rxhubs/checkpoints.sqlite",
        help="checkpoint store URL: memory:, sqlite:///PATH, blob://CONTAINER (default sqlite:///.rxhubs/checkpoints.sqlite)",
    )
    parser.add_argument(
        "--storage-connection-string", help=f"storage connection string for blob:// (default: ${STORAGE_VARIABLE})"
    )


def open_hub(args: argparse.Namespace) -> Any:
    """The hub the options name; ConfigurationError if none is given."""
    from rxhubs.transport import EventHub

    conn = args.connection_string or os.environ.get(HUB_VARIABLE)
    if not conn:
        raise ConfigurationError(f"no connection string: pass --connection-string or set {HUB_VARIABLE}")
    return EventHub.from_connection_string(conn, eventhub_name=args.eventhub, retry_total=1)


def open_target(args: argparse.Namespace) -> Any:
    """The hub ``--sink eventhub:HUB`` names, in the source's namespace with its credentials; None for other sinks."""
    from rxhubs.transport import EventHub
    from rxhubs.transport._connection_string import parse_connection_string

    kind, _, name = args.sink.partition(":")
    if kind != "eventhub":
        return None
    if not name:
        raise ConfigurationError("--sink eventhub:HUB needs the target hub's name, e.g. eventhub:enriched")
    source = open_hub(args)  # checks the connection string the same way (and is not opened)
    conn = parse_connection_string(args.connection_string or os.environ[HUB_VARIABLE], source.eventhub_name)
    return EventHub.from_connection_string(conn.with_eventhub_name(name).to_connection_string(), retry_total=3)


def open_store(args: argparse.Namespace) -> Any:
    """The checkpoint store the options name."""
    from rxhubs.stores import from_url

    kwargs: dict[str, Any] = {}
    if args.store.startswith("blob:"):
        conn = args.storage_connection_string or os.environ.get(STORAGE_VARIABLE)
        if conn:
            kwargs["connection_string"] = conn
    return from_url(args.store, **kwargs)


async def close_all(*resources: Any) -> None:
    """Close each hub and store given (None is skipped), in order, even when an earlier close fails.

    A command must leave no HTTP session, AMQP connection or socket open behind it: the blob store's aiohttp
    session, left open, ends the process with "Unclosed client session" on stderr. A failed close is logged
    at debug level and does not hide the command's own outcome.
    """
    for resource in resources:
        close = getattr(resource, "close", None)
        if close is None:
            continue
        try:
            result = close()
            if hasattr(result, "__await__"):
                await result
        except Exception as exc:  # closing must not mask what the command reported
            from rxhubs.transport._connection_string import redact

            _log.debug("closing %r failed: %s", resource, redact(str(exc)))


@contextlib.asynccontextmanager
async def opened(args: argparse.Namespace) -> AsyncIterator[tuple[Any, Any]]:
    """The hub and store the options name, as an async context: both are closed on exit, whatever happened."""
    hub = open_hub(args)
    try:
        store = open_store(args)
    except BaseException:
        await close_all(hub)
        raise
    try:
        yield hub, store
    finally:
        await close_all(hub, store)
