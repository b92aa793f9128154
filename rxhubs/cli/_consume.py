"""``rxhubs consume``: consume a hub (Azure or the emulator) into a sink, checkpointing after the sink."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from rxhubs.cli._common import add_hub_options, close_all, open_hub, open_store, open_target
from rxhubs.errors import AuthenticationError, ConfigurationError, NotFoundError

EXAMPLES = """examples:
  export EVENTHUB_CONNECTION_STRING='Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=telemetry'
  rxhubs consume                                        print events, checkpoints in .rxhubs/checkpoints.sqlite
  rxhubs consume --sink jsonl:out/events.jsonl --store sqlite:///cp.sqlite
  rxhubs consume --sink sqlite:events.db               exactly once into a SQLite table (docs/exactly-once.md)
  rxhubs consume --sink delta:out/events                exactly once into a Delta table (pip install 'rxhubs[delta]')
  rxhubs consume --sink eventhub:enriched               publish to hub 'enriched' (same namespace), then checkpoint
  rxhubs consume --sink parquet:out/parquet --store blob://checkpoints   (blob: AZURE_STORAGE_CONNECTION_STRING)
  rxhubs consume --start earliest --duration 30         ignore stored checkpoints, stop after 30 s
  rxhubs consume --workers 4 --sink jsonl:out/events.jsonl   4 processes (out/events.w0.jsonl ... w3)

Several 'rxhubs consume' processes with the same consumer group and store share the partitions; --workers N
starts N of them at once (every core of one machine), restarts one that dies and prints events per worker.
Ctrl-C stops gracefully: batches in flight finish, checkpoints flush, partitions are released.
"""

POSITIONS = {"earliest", "latest"}


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="consume a hub into a sink (console, JSON lines, Parquet), checkpointing after the sink",
        description="Consume an event hub with balancing and checkpoints: the sink first, then the checkpoint.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_hub_options(parser)
    parser.add_argument(
        "--sink", default="console",
        help="console, jsonl:PATH, parquet:PATH, eventhub:HUB (a hub of the same namespace) or, exactly once,"
        " sqlite:PATH or delta:PATH (default console)",
    )
    parser.add_argument("--owner-id", help="this consumer's id (default: a random one)")
    parser.add_argument("--start", choices=sorted(POSITIONS), help="start here, ignoring stored checkpoints")
    parser.add_argument(
        "--default-start", choices=sorted(POSITIONS), default="earliest",
        help="where partitions without a checkpoint start (default earliest)",
    )
    parser.add_argument("--strategy", choices=["greedy", "balanced"], default="greedy")
    parser.add_argument("--interval", type=float, default=None, help="load-balancing interval, seconds")
    parser.add_argument("--checkpoint-interval", type=float, default=5.0, help="seconds between checkpoints")
    parser.add_argument("--duration", type=float, default=None, help="stop gracefully after this many seconds")
    parser.add_argument(
        "--workers", type=int, default=None,
        help="run N consumer processes (default 1; 0: one per CPU); a store every process can share is needed",
    )
    parser.add_argument(
        "--lag-endpoint", metavar="[HOST:]PORT",
        help="serve the group's lag over HTTP: /metrics (Prometheus) and /lag (JSON, for KEDA's metrics-api"
        " scaler); a bare port binds 127.0.0.1",
    )
    parser.add_argument("--seed-checkpoint", action="store_true",
                        help="write a checkpoint where a partition without one starts (KEDA then sees no backlog)")
    parser.add_argument("--checkpoint-out-of-range", choices=["earliest", "latest", "fail", "off"], default="earliest",
                        help="a checkpoint outside its partition (a recreated hub): where to read (default earliest)")
    parser.add_argument("--gc-thresholds", type=_thresholds, metavar="N,N,N",
                        help="the garbage collector's thresholds while consuming, e.g. 50000,20,100 for hundreds of"
                        " partitions per process (docs/operations.md, large hubs; default: the interpreter's)")
    parser.set_defaults(run=run)


def _thresholds(text: str) -> tuple[int, int, int]:
    """``--gc-thresholds 50000,20,100`` (checked again by ``arun``)."""
    try:
        first, second, third = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"three whole numbers separated by commas, got {text!r}") from None
    return first, second, third


def lag_server(args: argparse.Namespace) -> Any:
    """The ``--lag-endpoint`` server (not started), or None."""
    if not args.lag_endpoint:
        return None
    from rxhubs.operate import LagServer
    from rxhubs.operate._lag_server import parse_address

    host, port = parse_address(args.lag_endpoint)
    return LagServer(lambda: open_hub(args), lambda: open_store(args), args.consumer_group, host=host, port=port)


def _serving(server: Any) -> None:
    server.start()
    print(f"rxhubs consume: lag at {server.url}/metrics and {server.url}/lag", file=sys.stderr, flush=True)


def exactly_once(spec: str, options: dict[str, Any]) -> tuple[Any, Any]:
    """``(operator, table)`` for a table spec (``sqlite:PATH``, ``delta:PATH``): reads resume from the table.

    ``(None, None)`` for any other spec.
    """
    from rxhubs import operators as hops
    from rxhubs.tables import sink_for

    table = sink_for(spec)
    if table is None:
        return None, None
    options["positions"] = table
    return hops.exactly_once(table), table


def _sink(spec: str, worker: int | None = None, hub: Any = None) -> Any:
    """The sink a spec names; a worker writes files of its own (JSON lines ``name.wN.jsonl``, Parquet ``worker=N``).

    ``eventhub:HUB`` publishes to ``hub`` (:func:`~rxhubs.cli._common.open_target`'s), keys kept.
    """
    from rxhubs.operators._sinks import console_sink, jsonl_sink

    kind, _, target = spec.partition(":")
    if kind == "eventhub" and hub is not None:
        from rxhubs import operators as hops

        return hops.publish(hub)
    if worker is not None and target:
        path = Path(target)
        target = str(path / f"worker={worker}" if kind == "parquet" else path.with_suffix(f".w{worker}{path.suffix}"))
    if kind == "console" and not target:
        return console_sink()
    if kind == "jsonl" and target:
        return jsonl_sink(Path(target))
    if kind == "parquet" and target:
        folder = Path(target)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / ".rxhubs-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise ConfigurationError(f"cannot write to {folder}: {exc.strerror or exc}") from exc
        from rxhubs import spark

        parquet = str(folder)
        return spark.write(lambda df: df.write.mode("append").parquet(parquet), spark=spark.local_session())
    raise ConfigurationError(f"unknown sink {spec!r}: use console, jsonl:PATH, parquet:PATH or eventhub:HUB")


async def preflight(hub: Any) -> None:
    """Fail fast on what retrying cannot fix: an unreachable endpoint or an unknown hub.

    Once running, the pipeline retries transient failures for ever (a long-running consumer should ride out
    an outage); at start-up the same failures are far more likely a typo, so the command reports them in one
    line (exit code 2) instead of logging retries.

    Raises:
        NotFoundError: Unknown hub.
        TransportError: The endpoint cannot be reached.
    """
    await hub.get_partition_ids()


def _options(args: argparse.Namespace) -> dict[str, Any]:
    from rxhubs._models import Position

    options: dict[str, Any] = {
        "strategy": args.strategy,
        "default_start": Position.coerce(args.default_start),
    }
    if args.owner_id:
        options["owner_id"] = args.owner_id
    if args.start:
        options["start"] = Position.coerce(args.start)
    if args.interval:
        options["load_balancing_interval"] = args.interval
    if args.seed_checkpoint:
        options["seed_checkpoint"] = True
    policy = args.checkpoint_out_of_range
    options["checkpoint_out_of_range"] = None if policy == "off" else policy
    return options


def worker_pipeline(args: argparse.Namespace, context: Any) -> Any:
    """One worker's pipeline for ``--workers``: the same as a single process's, with its own owner id and files."""
    import rxhubs
    from rxhubs import operators as hops

    hub = context.closing(open_hub(args))
    store = context.closing(open_store(args))
    options = {**_options(args), "owner_id": context.owner_id}
    target = open_target(args)
    sink, table = exactly_once(args.sink, options)
    if table is not None:
        context.closing(table)
    sink = sink or _sink(args.sink, context.index, target and context.closing(target))
    return rxhubs.consume(hub, args.consumer_group, store, **options).pipe(
        sink, hops.checkpoint(store, max_interval=args.checkpoint_interval)
    )


def run_workers(args: argparse.Namespace) -> int:
    """``--workers N``: check the hub once here (typos fail fast), then run N worker processes."""
    import functools
    import os

    import rxhubs

    if args.workers < 0:
        raise ConfigurationError("--workers must be >= 0 (0: one per CPU)")
    if args.store.startswith("memory:"):
        raise ConfigurationError("--workers needs a store the processes share (sqlite:// or blob://), not memory:")
    hub, target = open_hub(args), open_target(args)

    async def check() -> None:
        try:
            await preflight(hub)
            if target is not None:
                await preflight(target)
        finally:
            await close_all(hub, target)

    asyncio.run(check())
    server = lag_server(args)
    if server is not None:
        _serving(server)  # here, to print its address; run_workers stops it
    summary = rxhubs.run_workers(
        functools.partial(worker_pipeline, args), workers=args.workers or os.cpu_count() or 1,
        owner_prefix=args.owner_id, duration=args.duration, lag=server, gc_thresholds=args.gc_thresholds,
    )
    print(summary, flush=True)
    return 0 if summary.ok else 1


def run(args: argparse.Namespace) -> int:
    import rxhubs
    from rxhubs import Shutdown
    from rxhubs import operators as hops

    if args.duration is not None and args.duration <= 0:
        raise ConfigurationError("--duration must be > 0")
    if args.workers is not None and args.workers != 1:
        return run_workers(args)
    options = _options(args)
    # Bad options fail here, before any I/O. Hub and store are always closed on the loop that used them: an
    # aiohttp session (blob store) or AMQP connection left open ends the run with "Unclosed client session".
    server = lag_server(args)
    hub = open_hub(args)
    store: Any = None
    target: Any = None
    table: Any = None
    try:
        store = open_store(args)
        target = open_target(args)
        sink, table = exactly_once(args.sink, options)
        sink = sink or _sink(args.sink, hub=target)
    except BaseException:
        asyncio.run(close_all(hub, store, target, table))
        raise

    async def main() -> None:
        try:
            await preflight(hub)
            if target is not None:
                await preflight(target)
            stop = Shutdown()
            fatal: list[BaseException] = []

            def on_partition_error(context: Any, error: BaseException) -> None:
                # an unknown consumer group or refused credentials show up at the first pull: stop, exit 2
                if isinstance(error, NotFoundError | AuthenticationError) and not fatal:
                    fatal.append(error)
                    stop.request()

            pipeline = rxhubs.consume(
                hub, args.consumer_group, store, on_partition_error=on_partition_error, **options
            ).pipe(sink, hops.checkpoint(store, max_interval=args.checkpoint_interval))
            if args.duration:
                asyncio.get_running_loop().call_later(args.duration, stop.request)
            await rxhubs.arun(pipeline, shutdown=stop, gc_thresholds=args.gc_thresholds)
            if fatal:
                raise fatal[0]
        finally:
            await close_all(hub, store, target, table)

    if server is not None:
        _serving(server)
    try:
        asyncio.run(main())
    finally:
        if server is not None:
            server.stop()
    return 0
