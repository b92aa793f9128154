"""``rxhubs bench SCENARIO``: run benchmark scenarios; a table, or JSON lines with ``--json``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from rxhubs.bench._report import format_table, to_json_lines
from rxhubs.errors import ConfigurationError

# Every scenario: name -> module with run(args) -> list[dict]. Registering a scenario is one line here; its
# module's docstring opens with "Scenario ``name``: what it measures." (the line `rxhubs bench --help` shows),
# a module that runs in virtual time sets VIRTUAL_TIME = True (CI then also requires its `met` flags), and
# tests/bench/test_bench_smoke.py runs each one with --smoke.
SCENARIOS = {
    "overhead": "rxhubs.bench._overhead",
    "receiver": "rxhubs.bench._receiver",
    "emulator": "rxhubs.bench._emulator",
    "stores": "rxhubs.bench._stores",
    "rebalance": "rxhubs.bench.rebalance._scenario",
    "handover": "rxhubs.bench.handover._scenario",
    "checkpoints": "rxhubs.bench._checkpoints",
    "spark": "rxhubs.bench._spark",
    "spark-source": "rxhubs.bench._spark_source",
    "spark-write": "rxhubs.bench._spark_write",
    "throughput": "rxhubs.bench.throughput._scenario",
    "decode": "rxhubs.bench._decode",
    "trickle": "rxhubs.bench._trickle",
    "soak": "rxhubs.bench._soak",
    "scale": "rxhubs.bench.rebalance._scale",
    "workers": "rxhubs.bench.workers._scenario",
    "silent": "rxhubs.bench._silent",
    "publish": "rxhubs.bench.publish._scenario",
    "chaos": "rxhubs.chaos._scenario",
    "state": "rxhubs.bench.state._scenario",
    "exactly-once": "rxhubs.bench.exactly_once._scenario",
    "capture": "rxhubs.bench._capture",
    "schemas": "rxhubs.bench._schemas",
}

EXAMPLES = """
examples:
  rxhubs bench overhead            Rx overhead per batch vs a plain receive loop
  rxhubs bench rebalance --json    convergence in load-balancing intervals, one JSON object per line
  rxhubs bench all --quick         every scenario, shorter runs
  rxhubs bench all --smoke --json  every scenario at the least size that runs each step (what CI runs)
  rxhubs bench rebalance --plot docs/img   also draw the plots of docs/performance.md
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run benchmark scenarios (rxhubs vs the strongest alternative, same run)",
        description="Run benchmark scenarios; each prints figures comparing rxhubs with a baseline.",
        epilog=scenario_list() + EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", help="a scenario name (listed below), or all")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure, one per line")
    parser.add_argument("--quick", action="store_true", help="shorter runs (less precise)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the least that runs every step, seconds per scenario (CI; the figures are not measurements)",
    )
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds, for time-based scenarios (soak; chaos: 480)")
    parser.add_argument("--partitions", type=int, default=None, help="handover: the hub's partitions (default 16)")
    parser.add_argument("--trials", type=int, default=None, help="handover: trials per side (default 6)")
    parser.add_argument("--rate", type=int, default=None, help="handover: events/s sent in all (default 800)")
    parser.add_argument("--real", action="store_true",
                        help="scale: real processes, emulator and Azurite (1,024 partitions, 1 -> 8 -> 4 consumers)")
    parser.add_argument("--unfenced", action="store_true",
                        help="handover: rxhubs' blob store without its fence (a comparison; users get the fence)")
    parser.add_argument(
        "--plot",
        metavar="DIR",
        default=None,
        help="also draw docs/performance.md's plots into DIR (throughput bars; the rebalance timeline)",
    )
    # chaos: rxhubs bench chaos --seed N --duration S --out DIR (docs/testing.md, "Chaos run")
    parser.add_argument("--seed", type=int, default=None, help="chaos: the schedule's seed (default: random, printed)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="chaos: folder for ledgers and report (default: a new rxhubs-chaos-SEED-* temp folder)")
    parser.set_defaults(run=run)


def _available() -> list[str]:
    return [name for name, module in SCENARIOS.items() if importlib.util.find_spec(module) is not None]


def describe(name: str) -> str:
    """The first line of the scenario module's docstring, read without importing it (Spark stays unloaded).

    Example:
        >>> describe("overhead")
        'the cost of the Rx partition source over a plain receive loop.'
    """
    spec = importlib.util.find_spec(SCENARIOS[name])
    if spec is None or spec.origin is None:
        return "(not available)"
    parts = Path(spec.origin).read_text(encoding="utf-8").split('"""', 2)
    first = parts[1].strip().splitlines()[0] if len(parts) == 3 and parts[1].strip() else ""
    _, colon, rest = first.partition(": ")
    return (rest if colon else first).replace("``", "").strip()


def scenario_list() -> str:
    """``rxhubs bench --help``'s list: every available scenario, one line each."""
    names = _available()
    width = max(len(name) for name in names)
    return "scenarios:\n" + "\n".join(f"  {name.ljust(width)}  {describe(name)}" for name in names) + "\n"


def run(args: argparse.Namespace) -> int:
    available = _available()
    if args.scenario == "all":
        names = [name for name in available if name != "chaos"]  # chaos runs alone, by name
    elif args.scenario in available:
        names = [args.scenario]
    else:
        raise ConfigurationError(f"unknown scenario {args.scenario!r} (choose from {', '.join(available)}, all)")
    every: list[dict[str, Any]] = []
    for name in names:
        module = importlib.import_module(SCENARIOS[name])
        figures = module.run(args)
        every.extend(figures)
        if args.json:
            print(to_json_lines(figures), flush=True)
        else:
            print(format_table(figures), flush=True)
            print(file=sys.stdout, flush=True)
    if args.plot:
        from rxhubs.bench._plots import draw

        for path in draw(Path(args.plot), every, rebalance="rebalance" in names):
            print(f"wrote {path}", file=sys.stderr, flush=True)
    # a chaos run that failed its checks fails the command
    return 1 if any(f.get("metric") == "verdict" and f.get("met") is False for f in every) else 0
