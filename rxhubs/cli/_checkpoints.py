"""``rxhubs checkpoints``: who owns which partition, where each checkpoint stands, and the lag."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from rxhubs.cli._common import add_hub_options, opened
from rxhubs.errors import ConfigurationError, RxHubsError

EXAMPLES = """examples:
  export EVENTHUB_CONNECTION_STRING='Endpoint=sb://...;EntityPath=telemetry'
  rxhubs checkpoints --store sqlite:///.rxhubs/checkpoints.sqlite
  rxhubs checkpoints -g analytics --store blob://checkpoints --json
  rxhubs checkpoints --watch                      refresh every 2 s until Ctrl-C (exit code 0)
  rxhubs checkpoints --watch --interval 10 --count 6 --json   six snapshots 10 s apart, then exit
  rxhubs checkpoints --table sqlite:events.db     also the table's position (rxhubs consume --sink sqlite:...)
  rxhubs checkpoints reset --to-earliest          move the group's positions (dry run; see reset --help)

Columns: partition, owner (empty: released or never claimed), ownership age in seconds (older than the
expiry means the owner stopped renewing), checkpoint sequence number, the partition's last enqueued
sequence number, and lag (events after the checkpoint). With --table (an exactly-once sink), a column
'table' shows the table's position (its last sequence number of the partition), and lag counts from it: the
table's position is where a new owner resumes (docs/exactly-once.md).

With --watch, a failure that may pass (a store or hub outage) is reported on stderr and the next refresh
tries again; one that will not (refused credentials, an unknown hub) ends the command with exit code 2.
"""

#: Seconds between refreshes of ``--watch`` unless ``--interval`` says otherwise.
DEFAULT_INTERVAL = 2.0
_CLEAR = "\x1b[H\x1b[2J"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "checkpoints",
        help="show ownership, checkpoints and lag of a consumer group",
        description="Show, per partition, the owner, the ownership age, the checkpoint, the last enqueued "
        "sequence number and the lag of a consumer group.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_hub_options(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per partition, one per line")
    parser.add_argument("--watch", action="store_true", help="refresh the table until Ctrl-C (exit code 0)")
    parser.add_argument(
        "--interval", type=float, default=None, help=f"seconds between refreshes (default {DEFAULT_INTERVAL:g})"
    )
    parser.add_argument("--count", type=int, default=None, help="with --watch: stop after this many refreshes")
    parser.add_argument(
        "--table", help="an exactly-once table (sqlite:PATH, delta:PATH): show its position per partition"
    )
    parser.set_defaults(run=run)
    from rxhubs.cli import _reset

    _reset.add_parser(parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser)))


async def collect(
    hub: Any, store: Any, consumer_group: str, now: float | None = None, table: Any = None
) -> list[dict[str, Any]]:
    """One row per partition: owner, ownership age, checkpoint, last enqueued sequence number, lag.

    With ``table`` (a transactional sink), also ``table``: its position, from which lag then counts.
    """
    from rxhubs._models import PartitionContext

    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    partition_ids = list(await hub.get_partition_ids())
    positions: dict[str, int | None] = {}
    if table is not None:
        found = await table.positions([PartitionContext(ns, name, consumer_group, p) for p in partition_ids])
        positions = dict(found)
    ownership = {o.partition_id: o for o in await store.list_ownership(ns, name, consumer_group)}
    checkpoints = {c.partition_id: c for c in await store.list_checkpoints(ns, name, consumer_group)}
    props = await asyncio.gather(*(hub.get_partition_properties(p) for p in partition_ids))
    now = time.time() if now is None else now
    rows = []
    for p, prop in zip(partition_ids, props, strict=True):
        own = ownership.get(p)
        cp = checkpoints.get(p)
        last = prop.last_enqueued_sequence_number
        checkpoint = cp.sequence_number if cp else None
        done = positions.get(p) if table is not None else checkpoint
        lag = last - (done if done is not None else prop.beginning_sequence_number - 1)
        extra = {"table": positions.get(p)} if table is not None else {}
        rows.append({
            "partition": p,
            "owner": own.owner_id if own else None,
            "ownership_age_s": round(now - own.last_modified_time, 1) if own and own.last_modified_time else None,
            "checkpoint": checkpoint,
            "last_enqueued": last,
            "lag": max(0, lag) if not prop.is_empty else 0,
            **extra,
        })
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A plain table."""
    with_table = any("table" in r for r in rows)
    header = f"{'partition':>9}  {'owner':<24} {'age s':>7} {'checkpoint':>11} " + (
        f"{'table':>11} " if with_table else "") + f"{'last enqueued':>14} {'lag':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        age = "-" if r["ownership_age_s"] is None else f"{r['ownership_age_s']:.1f}"
        checkpoint = "-" if r["checkpoint"] is None else f"{r['checkpoint']:,}"
        table = ("-" if r.get("table") is None else f"{r['table']:,}") if with_table else None
        lines.append(
            f"{r['partition']:>9}  {r['owner'] or '-':<24} {age:>7} {checkpoint:>11} "
            + (f"{table:>11} " if table is not None else "")
            + f"{r['last_enqueued']:>14,} {r['lag']:>9,}"
        )
    return "\n".join(lines)


def _check(args: argparse.Namespace) -> None:
    if not args.watch and (args.interval is not None or args.count is not None):
        raise ConfigurationError("--interval and --count need --watch")
    if args.interval is not None and not args.interval > 0:
        raise ConfigurationError(f"--interval must be seconds > 0, got {args.interval:g}")
    if args.count is not None and args.count < 1:
        raise ConfigurationError(f"--count must be >= 1, got {args.count}")


def _show(rows: list[dict[str, Any]], args: argparse.Namespace, out: TextIO, at: float | None = None) -> None:
    if args.json:
        for row in rows:
            print(json.dumps(row if at is None else {**row, "time": round(at, 3)}), file=out)
    elif at is None:
        print(format_rows(rows), file=out)
    else:
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        title = (
            f"rxhubs checkpoints: {args.consumer_group} at {stamp} "
            f"(every {args.interval or DEFAULT_INTERVAL:g} s; Ctrl-C to stop)"
        )
        if out.isatty():
            print(_CLEAR + title + "\n\n" + format_rows(rows), file=out)
        else:
            print(title + "\n" + format_rows(rows) + "\n", file=out)
    out.flush()


async def watch(
    hub: Any, store: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
    stop: asyncio.Event | None = None, table: Any = None,
) -> None:
    """Print the table every ``--interval`` seconds, ``--count`` times, or until ``stop`` is set (Ctrl-C).

    The first refresh fails the command on any error (most likely a wrong option); later ones report an error
    that may pass (``retriable``) on ``err`` and try again at the next refresh.
    """
    interval = args.interval or DEFAULT_INTERVAL
    stop = stop or asyncio.Event()
    refreshes = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            rows = await collect(hub, store, args.consumer_group, table=table)
        except RxHubsError as exc:
            if refreshes == 0 or not exc.retriable:
                raise
            print(f"rxhubs checkpoints: {exc} (retrying in {interval:g} s)", file=err, flush=True)
        else:
            _show(rows, args, out, time.time())
        refreshes += 1
        if args.count is not None and refreshes >= args.count:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, interval - (time.monotonic() - started)))


def _table(spec: str | None) -> Any:
    """The table ``--table`` names (it must exist already), or None."""
    if not spec:
        return None
    from pathlib import Path

    from rxhubs.tables import sink_for

    table = sink_for(spec)
    if table is None:
        raise ConfigurationError(f"--table takes an exactly-once table (sqlite:PATH, delta:PATH), got {spec!r}")
    path = getattr(table, "path", None)
    if isinstance(path, str) and not Path(path).exists():
        raise ConfigurationError(f"--table {spec}: no such file {path}")
    return table


def run(args: argparse.Namespace) -> int:
    _check(args)
    table = _table(args.table)

    async def main() -> list[dict[str, Any]]:
        try:
            async with opened(args) as (hub, store):
                return await show(hub, store)
        finally:
            if table is not None:
                await table.close()

    async def show(hub: Any, store: Any) -> list[dict[str, Any]]:
        if args.watch:
            # Ctrl-C ends the watch after the refresh under way, never inside an SDK call (a cancelled
            # management call can swallow the cancellation and leave the command running).
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, stop.set)
            try:
                await watch(hub, store, args, stop=stop, table=table)
            finally:
                loop.remove_signal_handler(signal.SIGINT)
            return []
        return await collect(hub, store, args.consumer_group, table=table)

    try:
        rows = asyncio.run(main())
    except KeyboardInterrupt:
        if args.watch:
            return 0  # Ctrl-C is how a watch ends; hub and store were closed on the way out
        raise
    if not args.watch:
        _show(rows, args, sys.stdout)
    return 0
