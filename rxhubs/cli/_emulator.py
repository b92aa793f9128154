"""``rxhubs emulator``: run a local Event Hubs emulator until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING, Any

from rxhubs.cli._emulator_history import EXAMPLES as HISTORY_EXAMPLES
from rxhubs.cli._emulator_history import add_history_arguments, history_options
from rxhubs.errors import ConfigurationError

if TYPE_CHECKING:
    from rxhubs.emulator import LocalIdentity

EXAMPLES = """examples:
  rxhubs emulator --hub telemetry:4
  rxhubs emulator --hub telemetry:4 --hub orders:2 --port 5672 --data-dir .rxhubs/emulator
  rxhubs emulator --hub telemetry:8 --consumer-group analytics --consumer-group spark
  rxhubs emulator --hub telemetry:4 --keys RootManageSharedAccessKey=s3cret listener=k2
  rxhubs emulator --hub telemetry:4 --websocket-port 5673
  rxhubs emulator --hub telemetry:4 --control-port 8474      # then: rxhubs emulator fault --help
  rxhubs emulator --hub telemetry:4 --tls --identity-endpoint identity.env   # then: . ./identity.env

The emulator prints one connection string per hub (EntityPath=HUB, UseDevelopmentEmulator=true), then
serves until Ctrl-C or SIGTERM. With --data-dir every event is kept in append-only files and survives a
restart; without it events live in memory. With --keys, clients must authenticate with a SAS token made with
one of the keys (as the service requires); the connection strings carry the first key. With --websocket-port
it also serves AMQP over WebSockets: clients pass transport_type=TransportType.AmqpOverWebsocket and
custom_endpoint_address="sb://HOST:WEBSOCKET_PORT". Consumer group names ignore case, as in the service:
'$default' is '$Default'. With --control-port it serves a fault control API on 127.0.0.1 (printed at
start) that 'rxhubs emulator fault busy|close|steal|partitions|clear|status --control 127.0.0.1:PORT' calls.
With --identity-endpoint FILE it requires Entra ID style tokens of a local identity, serves the App Service
managed-identity protocol on 127.0.0.1 with them, and writes IDENTITY_ENDPOINT and IDENTITY_HEADER as shell
exports to FILE (readable by its owner only): a process that sources it and builds its clients with
azure.identity's DefaultAzureCredential, unmodified, authenticates (with --tls, as clients built from a host name
connect; pass transport_type=TransportType.Amqp beside custom_endpoint_address when the TLS port is not 5671).
"""


def add_parser(subparsers: Any) -> None:
    """Register the ``emulator`` subcommand."""
    parser = subparsers.add_parser(
        "emulator",
        help="run a local Event Hubs emulator (AMQP 1.0, for the azure-eventhub client)",
        description="Run a local Event Hubs namespace that the unmodified azure-eventhub client talks to.",
        epilog=EXAMPLES + "\n" + HISTORY_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hub", action="append", metavar="NAME:PARTITIONS", default=[],
                        help="an event hub and its partition count (repeatable; default telemetry:4)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="TCP port (default 5672; 0 picks a free one)")
    parser.add_argument("--data-dir", help="keep partitions as durable logs in this directory")
    parser.add_argument("--consumer-group", action="append", default=[], metavar="NAME",
                        help="a consumer group besides $Default (repeatable)")
    parser.add_argument("--keys", "--key", nargs="+", action="extend", default=[], metavar="NAME=KEY",
                        help="require SAS tokens signed with these shared access keys (policy name and key); "
                             "connection strings use the first")
    parser.add_argument("--websocket-port", type=int, default=None, metavar="PORT",
                        help="also serve AMQP over WebSockets on this port (0 picks a free one)")
    parser.add_argument("--control-port", type=int, default=None, metavar="PORT",
                        help="serve the fault control API on 127.0.0.1:PORT (0 picks a free one)")
    parser.add_argument("--max-message-size", type=int, default=1024 * 1024, metavar="BYTES",
                        help="the largest message a producer may send (default 1 MiB as on Standard; 20971520 for "
                             "Dedicated's 20 MiB)")
    parser.add_argument("--identity-endpoint", metavar="FILE", default=None,
                        help="require a local identity's tokens and serve them to DefaultAzureCredential (App Service "
                             "protocol on 127.0.0.1); FILE gets the two environment variables to export")
    add_history_arguments(parser)
    parser.set_defaults(run=run)
    from rxhubs.cli._emulator_fault import add_fault_parser

    add_fault_parser(parser)


def parse_hubs(specs: list[str]) -> dict[str, int]:
    """``["telemetry:4", "orders"]`` -> ``{"telemetry": 4, "orders": 1}``.

    Raises:
        ConfigurationError: A spec is malformed or a hub is given twice.
    """
    hubs: dict[str, int] = {}
    for spec in specs or ["telemetry:4"]:
        name, _, count = spec.partition(":")
        if not name:
            raise ConfigurationError(f"bad --hub {spec!r}: expected NAME:PARTITIONS, e.g. telemetry:4")
        try:
            partitions = int(count) if count else 1
        except ValueError:
            raise ConfigurationError(f"bad --hub {spec!r}: the partition count must be a whole number") from None
        if name in hubs:
            raise ConfigurationError(f"event hub {name!r} is given twice")
        hubs[name] = partitions
    return hubs


def parse_keys(specs: list[str]) -> dict[str, str] | None:
    """``["reader=abc", "writer=xyz"]`` -> ``{"reader": "abc", "writer": "xyz"}``; no specs -> None.

    Raises:
        ConfigurationError: An entry is not NAME=KEY, or a name is given twice. The message never shows a key.

    Example:
        >>> parse_keys(["RootManageSharedAccessKey=s3cret=="])
        {'RootManageSharedAccessKey': 's3cret=='}
    """
    if not specs:
        return None
    keys: dict[str, str] = {}
    for i, spec in enumerate(specs, 1):
        name, sep, key = spec.partition("=")
        if not sep or not name or not key:
            raise ConfigurationError(f"bad --keys entry #{i}: expected NAME=KEY (a shared access policy and its key)")
        if name in keys:
            raise ConfigurationError(f"key name {name!r} is given twice in --keys")
        keys[name] = key
    return keys


def run(args: argparse.Namespace) -> int:
    """Start the emulator, print its connection strings, serve until interrupted. Returns the exit code."""
    from rxhubs.emulator import Emulator

    hubs = parse_hubs(args.hub)
    identity = _identity(args.identity_endpoint)
    emulator = Emulator(hubs, host=args.host, port=args.port, data_dir=args.data_dir,
                        consumer_groups=args.consumer_group, keys=parse_keys(args.keys),
                        websocket_port=args.websocket_port, control_port=args.control_port,
                        max_message_size=args.max_message_size,
                        identities=[identity] if identity is not None else (), **history_options(args))
    if identity is None:
        return asyncio.run(_serve(emulator))
    from rxhubs.emulator import IdentityEndpoint

    with IdentityEndpoint(identity) as endpoint:
        _write_exports(args.identity_endpoint, endpoint.environment())
        print(f"rxhubs emulator: a managed-identity endpoint for DefaultAzureCredential at {endpoint.url}; "
              f"export what {args.identity_endpoint} holds ('. {args.identity_endpoint}')", file=sys.stderr,
              flush=True)
        return asyncio.run(_serve(emulator))


def _identity(path: str | None) -> LocalIdentity | None:
    if path is None:
        return None
    from rxhubs.emulator import LocalIdentity

    return LocalIdentity("rxhubs-emulator-identity")


def _write_exports(path: str, environment: dict[str, str]) -> None:
    """``export NAME='VALUE'`` lines to ``path``, created readable by its owner only (it holds the secret)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"export {name}={shlex.quote(value)}\n" for name, value in environment.items())


async def _serve(emulator: Any) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with emulator:
        for hub in emulator.hubs:
            print(emulator.connection_string(hub), flush=True)
        auth = (f"SAS tokens required (keys: {', '.join(emulator.key_names)})" if emulator.key_names
                else "any token accepted")
        print(f"rxhubs emulator: serving {len(emulator.hubs)} hub(s) on {emulator.host}:{emulator.port}; "
              f"{auth}; Ctrl-C to stop", file=sys.stderr, flush=True)
        if emulator.websocket_endpoint is not None:
            print(f"rxhubs emulator: AMQP over WebSockets on port {emulator.websocket_port}: "
                  "transport_type=TransportType.AmqpOverWebsocket, "
                  f"custom_endpoint_address={emulator.websocket_endpoint!r}", file=sys.stderr, flush=True)
        if emulator.tls_port is not None:
            options = emulator.tls_client_options()
            extra = (f", custom_endpoint_address={options['custom_endpoint_address']!r}"
                     if "custom_endpoint_address" in options else "")
            print(f"rxhubs emulator: AMQP over TLS on port {emulator.tls_port}: connection strings without "
                  f"UseDevelopmentEmulator, with connection_verify={str(emulator.ca_file)!r}{extra}",
                  file=sys.stderr, flush=True)
        if emulator.tls_websocket_port is not None:
            print(f"rxhubs emulator: AMQP over secure WebSockets on port {emulator.tls_websocket_port}: "
                  "transport_type=TransportType.AmqpOverWebsocket", file=sys.stderr, flush=True)
        history = emulator.history
        if history.target is not None:
            print(f"rxhubs emulator: Capture to {history.target!r}, a file per {history.capture_window:g} s",
                  file=sys.stderr, flush=True)
        if emulator.control_address is not None:
            print(f"rxhubs emulator: fault control on {emulator.control_address}: "
                  f"rxhubs emulator fault status --control {emulator.control_address}", file=sys.stderr, flush=True)
        await stop.wait()
    print("rxhubs emulator: stopped", file=sys.stderr, flush=True)
    return 0
