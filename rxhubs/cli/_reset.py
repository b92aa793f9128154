"""``rxhubs checkpoints reset``: move a consumer group's positions, dry run first (``--execute`` writes)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
from typing import Any

from rxhubs.cli._common import add_hub_options, opened
from rxhubs.errors import ConfigurationError

EXAMPLES = """examples:
  rxhubs checkpoints reset --store blob://checkpoints --to-datetime 2026-11-28T06:00:00Z   the plan (dry run)
  rxhubs checkpoints reset --store blob://checkpoints --to-datetime 2026-11-28T06:00:00Z --execute
  rxhubs checkpoints reset --to-earliest --partition 3 --execute       read partition 3 again from its start
  rxhubs checkpoints reset --shift-by -1000 --execute                  1,000 events back on every partition
  rxhubs checkpoints reset --to-sequence 0:4200 --to-sequence 1:17 --execute   resume exactly there

The table shows, per partition, the checkpoint now, the checkpoint after the reset (the last event done: the
group resumes just after it) and how many events the group skips (+) or reads again (-). A group with live
owners (ownership renewed within --expiration seconds) is refused; --force claims their partitions and fences
them, so they stop and can never write their old positions back. Checkpoints are written in the official
layout: rxhubs, the official EventProcessorClient and KEDA read them.
"""


def add_parser(subparsers: Any) -> None:
    """Add ``reset`` under ``rxhubs checkpoints``."""
    parser = subparsers.add_parser(
        "reset",
        help="move the consumer group's checkpoints (dry run unless --execute)",
        description="Move a consumer group's checkpoints to a time, the start or end of each partition, a shift "
        "or a sequence number: Kafka's --reset-offsets. Prints the plan; --execute writes it.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_hub_options(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the first retained event of each partition")
    target.add_argument("--to-latest", action="store_true", help="only events enqueued from now on")
    target.add_argument("--to-datetime", metavar="TIME", help="the first event enqueued at or after TIME (ISO 8601)")
    target.add_argument("--shift-by", type=int, metavar="N", help="N events forward (negative: back)")
    target.add_argument("--to-sequence", action="append", metavar="P:S", help="partition P resumes at sequence S")
    parser.add_argument("--partition", action="append", help="only this partition (repeat for more)")
    parser.add_argument("--execute", action="store_true", help="write the new checkpoints (default: dry run)")
    parser.add_argument("--force", action="store_true", help="fence live owners instead of refusing")
    parser.add_argument("--expiration", type=float, default=30.0,
                        help="seconds within which a renewed ownership counts as live (default 30)")
    parser.set_defaults(run=run)


def parse_time(text: str) -> _dt.datetime:
    """An ISO 8601 time; ``Z`` or an offset gives its zone, none means UTC.

    Example:
        >>> parse_time("2026-11-28T06:00:00Z").isoformat()
        '2026-11-28T06:00:00+00:00'
    """
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"--to-datetime takes an ISO 8601 time like 2026-11-28T06:00:00Z, got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.UTC)


def parse_sequences(specs: list[str]) -> dict[str, int]:
    """``["0:42", "1:7"]`` -> ``{"0": 42, "1": 7}``.

    Example:
        >>> parse_sequences(["0:42", "1:7"])
        {'0': 42, '1': 7}
    """
    out: dict[str, int] = {}
    for spec in specs:
        pid, _, seq = spec.partition(":")
        if not pid or not seq.lstrip("-").isdigit():
            raise ConfigurationError(f"--to-sequence takes PARTITION:SEQUENCE_NUMBER, like 0:4200, got {spec!r}")
        out[pid] = int(seq)
    return out


def run(args: argparse.Namespace) -> int:
    from rxhubs.operate import reset_positions

    to: Any = "earliest" if args.to_earliest else "latest" if args.to_latest else None
    if args.to_datetime is not None:
        to = parse_time(args.to_datetime)
    sequences = parse_sequences(args.to_sequence) if args.to_sequence else None
    if args.force and not args.execute:
        raise ConfigurationError("--force fences live owners when writing: it needs --execute")

    async def main() -> Any:
        async with opened(args) as (hub, store):
            return await reset_positions(
                hub, store, args.consumer_group, to=to, shift_by=args.shift_by, to_sequence=sequences,
                partition_ids=args.partition, execute=args.execute, force=args.force,
                ownership_expiration=args.expiration,
            )

    plan = asyncio.run(main())
    print(plan.format())
    if plan.executed:
        fenced = f"; fenced {plan.owners_text()}" if plan.live_owners else ""
        print(f"reset {sum(r.new is not None for r in plan.rows)} partition(s) of {args.consumer_group}{fenced}")
    else:
        print("dry run: nothing written; add --execute to write these checkpoints")
        if plan.live_owners:
            print(f"live owners: {plan.owners_text()}: --execute is refused unless --force (which fences them)")
    return 0
