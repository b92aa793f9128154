"""``rxhubs emulator``: run a local Event Hubs emulator until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from rxhubs.errors import ConfigurationError

EXAMPLES = """examples:
  rxhubs emulator --hub telemetry:4
  rxhubs emulator --hub telemetry:4 --hub orders:2 --port 5672 --data-dir .rxhubs/emulator
  rxhubs emulator --hub telemetry:8 --consumer-group analytics --consumer-group spark

The emulator prints one connection string per hub (EntityPath=HUB, UseDevelopmentEmulator=true), then
serves until Ctrl-C or SIGTERM. With --data-dir every event is kept in append-only files and survives a
restart; without it events live in memory.
"""


def add_parser(subparsers: Any) -> None:
    """Register the ``emulator`` subcommand."""
    parser = subparsers.add_parser(
        "emulator",
        help="run a local Event Hubs emulator (AMQP 1.0, for the azure-eventhub client)",
        description="Run a local Event Hubs namespace that the unmodified azure-eventhub client talks to.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hub", action="append", metavar="NAME:PARTITIONS", default=[],
                        help="an event hub and its partition count (repeatable; default telemetry:4)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="TCP port (default 5672; 0 picks a free one)")
    parser.add_argument("--data-dir", help="keep partitions as durable logs in this directory")
    parser.add_argument("--consumer-group", action="append", default=[], metavar="NAME",
                        help="a consumer group besides $Default (repeatable)")
    parser.set_defaults(run=run)


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


def run(args: argparse.Namespace) -> int:
    """Start the emulator, print its connection strings, serve until interrupted. Returns the exit code."""
    from rxhubs.emulator import Emulator

    hubs = parse_hubs(args.hub)
    emulator = Emulator(hubs, host=args.host, port=args.port, data_dir=args.data_dir,
                        consumer_groups=args.consumer_group)
    return asyncio.run(_serve(emulator))


async def _serve(emulator: Any) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with emulator:
        for hub in emulator.hubs:
            print(emulator.connection_string(hub), flush=True)
        print(f"rxhubs emulator: serving {len(emulator.hubs)} hub(s) on {emulator.host}:{emulator.port}; "
              "Ctrl-C to stop", file=sys.stderr, flush=True)
        await stop.wait()
    print("rxhubs emulator: stopped", file=sys.stderr, flush=True)
    return 0
