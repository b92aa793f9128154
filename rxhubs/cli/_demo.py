"""``rxhubs demo``: the main job, on embedded defaults (no cloud account)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  rxhubs demo                          60 s, 8 partitions, 3 consumer processes, Spark into Parquet
  rxhubs demo --duration 20 --no-spark a quick run, JSON lines instead of Spark
  rxhubs demo --partitions 16 --consumers 4 --rate 4000 --out /tmp/rxhubs-demo
  rxhubs demo --sink delta:demo-out/delta   exactly once into a Delta table (pip install 'rxhubs[delta]')

What happens: an emulator starts in this process; a producer sends a steady stream; consumer processes
balance the partitions through one SQLite checkpoint store, write through Spark and checkpoint after the
write; one consumer joins at a third of the run and the first stops gracefully at two thirds. At the end
the output is read back and every sent event is accounted for.
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the demo: emulator, balanced consumers, checkpoints, Spark sink",
        description="Run the end-to-end demo locally and prove that no event was lost.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of production (default 60)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the hub (default 8)")
    parser.add_argument("--consumers", type=int, default=3, help="consumer processes in all (default 3)")
    parser.add_argument("--rate", type=int, default=1000, help="events per second (default 1000)")
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="output folder (default ./demo-out)")
    parser.add_argument("--no-spark", action="store_true", help="write JSON lines instead of Parquet via Spark")
    parser.add_argument(
        "--sink", default=None, metavar="delta:PATH",
        help="write exactly once into the Delta table at PATH instead (no Spark; 'delta' alone: OUT/delta)",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="load-balancing interval, s (default 2)")
    parser.add_argument("--expiry", type=float, default=6.0, help="ownership expiry, s (default 6)")
    parser.add_argument("--plain", action="store_true", help="status lines instead of a live screen")
    parser.set_defaults(run=run)


def _delta(spec: str | None, out: Path) -> Path | None:
    """The Delta table ``--sink`` names (None: no --sink)."""
    if spec is None:
        return None
    from rxhubs.errors import ConfigurationError

    scheme, _, path = spec.partition(":")
    if scheme != "delta":
        raise ConfigurationError(f"--sink takes delta:PATH (or delta), got {spec!r}")
    from rxhubs.tables._delta_log import import_deltalake

    import_deltalake()  # without the extra: say what to install before anything starts
    return Path(path) if path else out / "delta"


def run(args: argparse.Namespace) -> int:
    from rxhubs.demo import DemoOptions, run_demo

    delta = _delta(args.sink, args.out)
    options = DemoOptions(
        duration=args.duration,
        partitions=args.partitions,
        consumers=args.consumers,
        rate=args.rate,
        out=args.out,
        spark=not args.no_spark and delta is None,
        delta=delta,
        interval=args.interval,
        expiry=args.expiry,
        live=False if args.plain else None,
    )
    summary = asyncio.run(run_demo(options, emit=lambda text: print(text, flush=True)))
    return 0 if summary.lost == 0 else 1
