"""The history and TLS options of ``rxhubs emulator``: retention (by time, by count), Capture, AMQP over TLS."""

from __future__ import annotations

import argparse
from typing import Any

from rxhubs.errors import ConfigurationError

EXAMPLES = """history (retention and Capture):
  rxhubs emulator --hub telemetry:4 --retention 3600 --retain-events 500
  rxhubs emulator --hub telemetry:4 --hub orders:2 --retention orders=86400 --retain-events telemetry=500
  rxhubs emulator --hub telemetry:4 --capture ./capture --capture-window 60
  AZURE_STORAGE_CONNECTION_STRING=... rxhubs emulator --hub telemetry:4 --capture blob://capture

Events older than --retention seconds expire (beyond the newest --retain-events of a partition too): the
partition's beginning_sequence_number moves, and a read from an expired position starts at the first
retained event, as in the service. --capture writes every partition's events as Avro files named and shaped as
Event Hubs Capture writes them ({Namespace}/{EventHub}/{PartitionId}/{Y}/{M}/{D}/{h}/{m}/{s}.avro), one per
--capture-window seconds (empty files included); rxhubs.sources.Capture reads them back.
"""


def add_history_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``--retention``, ``--retain-events`` and the ``--capture*`` options."""
    parser.add_argument("--retention", action="append", default=[], metavar="[HUB=]SECONDS",
                        help="keep events this many seconds (every hub, or HUB=SECONDS; repeatable)")
    parser.add_argument("--retain-events", action="append", default=[], metavar="[HUB=]N",
                        help="keep at most the newest N events per partition (every hub, or HUB=N; repeatable)")
    parser.add_argument("--capture", metavar="DIR|blob://CONTAINER[/PREFIX]",
                        help="Event Hubs Capture: write each partition's events as Avro files there")
    parser.add_argument("--capture-window", type=float, default=300.0, metavar="SECONDS",
                        help="seconds per Capture file (default 300)")
    parser.add_argument("--capture-size", type=int, default=300 * 1024 * 1024, metavar="BYTES",
                        help="bytes of events after which a Capture file is written early (default 300 MB)")
    parser.add_argument("--capture-namespace", default="emulator", metavar="NAME",
                        help="the {Namespace} of Capture file names (default 'emulator')")
    parser.add_argument("--capture-connection-string", metavar="CONNSTR",
                        help="storage account of a blob:// Capture (default: $AZURE_STORAGE_CONNECTION_STRING)")
    parser.add_argument("--tls", action="store_true",
                        help="also serve AMQP over TLS, with a certificate for 127.0.0.1 made at start")
    parser.add_argument("--tls-port", type=int, default=5671, metavar="PORT",
                        help="the TLS port (default 5671, the service's; 0 picks a free one)")
    parser.add_argument("--tls-ca-file", default="rxhubs-emulator-ca.pem", metavar="PATH",
                        help="where to write the CA certificate clients pass as connection_verify "
                             "(default ./rxhubs-emulator-ca.pem)")
    parser.add_argument("--tls-websocket-port", type=int, default=None, metavar="PORT",
                        help="also serve AMQP over secure WebSockets (wss://) there (443 is the service's)")


def _per_hub(specs: list[str], option: str, kind: type) -> Any:
    """``["60"]`` -> 60; ``["a=60", "b=5"]`` -> {"a": 60, "b": 5}; none -> None.

    Raises:
        ConfigurationError: A malformed value, or a value for every hub mixed with per-hub ones.

    Example:
        >>> _per_hub(["orders=86400", "telemetry=60"], "--retention", float)
        {'orders': 86400.0, 'telemetry': 60.0}
        >>> _per_hub(["500"], "--retain-events", int)
        500
    """
    if not specs:
        return None
    per_hub: dict[str, Any] = {}
    every: Any = None
    for spec in specs:
        hub, sep, value = spec.rpartition("=")
        try:
            number = kind(value)
        except ValueError:
            raise ConfigurationError(f"bad {option} {spec!r}: expected a number, or HUB=NUMBER") from None
        if sep:
            per_hub[hub] = number
        else:
            every = number
    if every is not None and per_hub:
        raise ConfigurationError(f"{option}: give one value for every hub or HUB=VALUE entries, not both")
    return per_hub or every


def history_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~rxhubs.emulator.Emulator` keyword arguments of the history options."""
    return {
        "retention": _per_hub(args.retention, "--retention", float),
        "retain_events": _per_hub(args.retain_events, "--retain-events", int),
        "capture": args.capture,
        "capture_window": args.capture_window,
        "capture_size": args.capture_size,
        "capture_namespace": args.capture_namespace,
        "capture_connection_string": args.capture_connection_string,
        **({"tls": True, "tls_port": args.tls_port, "tls_ca_file": args.tls_ca_file,
            "tls_websocket_port": args.tls_websocket_port} if args.tls else {}),
    }
