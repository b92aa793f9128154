"""``rxhubs checkpoints``: who owns which partition, where each checkpoint stands, and the lag."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from rxhubs.cli._common import add_hub_options, open_hub, open_store

EXAMPLES = """examples:
  export EVENTHUB_CONNECTION_STRING='Endpoint=sb://...;EntityPath=telemetry'
  rxhubs checkpoints --store sqlite:///.rxhubs/checkpoints.sqlite
  rxhubs checkpoints -g analytics --store blob://checkpoints --json

Columns: partition, owner (empty: released or never claimed), ownership age in seconds (older than the
expiry means the owner stopped renewing), checkpoint sequence number, the partition's last enqueued
sequence number, and lag (events after the checkpoint).
"""


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
    parser.set_defaults(run=run)


async def collect(hub: Any, store: Any, consumer_group: str, now: float | None = None) -> list[dict[str, Any]]:
    """One row per partition: owner, ownership age, checkpoint, last enqueued sequence number, lag."""
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    partition_ids = list(await hub.get_partition_ids())
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
        lag = last - (checkpoint if checkpoint is not None else prop.beginning_sequence_number - 1)
        rows.append({
            "partition": p,
            "owner": own.owner_id if own else None,
            "ownership_age_s": round(now - own.last_modified_time, 1) if own and own.last_modified_time else None,
            "checkpoint": checkpoint,
            "last_enqueued": last,
            "lag": max(0, lag) if not prop.is_empty else 0,
        })
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A plain table."""
    header = f"{'partition':>9}  {'owner':<24} {'age s':>7} {'checkpoint':>11} {'last enqueued':>14} {'lag':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        age = "-" if r["ownership_age_s"] is None else f"{r['ownership_age_s']:.1f}"
        checkpoint = "-" if r["checkpoint"] is None else f"{r['checkpoint']:,}"
        lines.append(
            f"{r['partition']:>9}  {r['owner'] or '-':<24} {age:>7} {checkpoint:>11} "
            f"{r['last_enqueued']:>14,} {r['lag']:>9,}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    async def main() -> list[dict[str, Any]]:
        hub = open_hub(args)
        store = open_store(args)
        try:
            return await collect(hub, store, args.consumer_group)
        finally:
            await hub.close()
            close = getattr(store, "close", None)
            if close is not None:
                await close()

    rows = asyncio.run(main())
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(format_rows(rows))
    return 0
