"""The Spark source's Arrow builder alone: its cost per event on stored emulator frames (a developer's measure).

What one Python worker's :class:`FrameColumns <rxhubs.spark._arrow_frames_py.FrameColumns>` spends per event on
the frames a read task parses: 1 KB bodies with two application properties (the emulator's own frames,
:func:`~rxhubs.testing._emulator_frames.emulator_frames`), parsed a chunk of 256 frames at a time (about what
one socket read of 256 KiB holds) and handed over with ``take()`` after each chunk. Not a ``rxhubs bench``
scenario (no baseline to pair with); run it by hand::

    .venv/bin/python -m rxhubs.bench._builder_cost              # CPU us per event, compiled and Python builds
    .venv/bin/python -m rxhubs.bench._builder_cost --callgrind  # instructions per event, compiled build

``--callgrind`` runs this module twice under ``valgrind --tool=callgrind`` (once with 2 chunks' rounds, once
with 12) and divides the difference of the instructions counted by the difference of the events parsed: set-up,
imports and the frames' making cancel out, so the figure does not depend on the machine's load. The CPU figure
is the best of several rounds of ``time.process_time`` (it moves with load: alternate builds when comparing).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["builder", "callgrind_per_event", "cpu_per_event", "frames", "parse_rounds"]

CHUNK = 256  # frames per parse call


def frames(body: int = 1024, properties: int = 2) -> bytes:
    """A chunk of :data:`CHUNK` transfer frames as the emulator sends them (channel 1, handle 0)."""
    from rxhubs.testing._emulator_frames import emulator_frames

    return emulator_frames(body, properties, count=CHUNK)


def builder(compiled: bool) -> Any:
    """A new ``FrameColumns`` of the compiled build (``compiled``) or of the Python build."""
    from rxhubs.spark import _arrow_frames_py
    from rxhubs.spark._arrow_batch import compiled_builder, slow_row

    module = compiled_builder() if compiled else _arrow_frames_py
    if module is None:
        raise SystemExit("no compiled Arrow builder here (RXHUBS_NO_EXTENSIONS, or not built)")
    return module.FrameColumns(slow_row)


def parse_rounds(columns: Any, chunk: bytes, rounds: int) -> int:
    """Parse ``chunk`` ``rounds`` times, taking the buffers after each: the rows parsed."""
    rows = 0
    for _ in range(rounds):
        added, consumed, other, _last = columns.parse(chunk, 1, 0)
        if other is not None or consumed != len(chunk) or added != CHUNK:
            raise RuntimeError(f"the builder handed a frame back (consumed {consumed} of {len(chunk)})")
        rows += columns.take()[0]
    return rows


def cpu_per_event(compiled: bool, rounds: int = 200, repeats: int = 5) -> float:
    """Microseconds of CPU per event, the best of ``repeats`` runs of ``rounds`` chunks."""
    chunk = frames()
    columns = builder(compiled)
    parse_rounds(columns, chunk, 2)  # warm: the buffers grown to a chunk's size
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        rows = parse_rounds(columns, chunk, rounds)
        best = min(best, (time.process_time() - start) / rows * 1e6)
    return best


def _instructions(rounds: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                        "rxhubs.bench._builder_cost", "--rounds", str(rounds)],
                       check=True, env=env, capture_output=True)
        with open(out) as f:
            total = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.MULTILINE)
    if total is None:
        raise RuntimeError("no instruction total in callgrind's output")
    return int(total.group(1))


def callgrind_per_event(low: int = 2, high: int = 12) -> float:
    """Instructions per event of the compiled build: two runs under callgrind, differenced."""
    return (_instructions(high) - _instructions(low)) / ((high - low) * CHUNK)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rxhubs.bench._builder_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--callgrind", action="store_true", help="instructions per event (valgrind), compiled build")
    parser.add_argument("--compiled", action="store_true", help="CPU per event of the compiled build only")
    parser.add_argument("--rounds", type=int, default=0, help=argparse.SUPPRESS)  # (one run under callgrind)
    args = parser.parse_args(argv)
    if args.rounds:
        parse_rounds(builder(True), frames(), args.rounds)
    elif args.callgrind:
        print(f"compiled builder: {callgrind_per_event():,.0f} instructions per 1 KB event (2 properties)")
    else:
        load = os.getloadavg()[0]
        for compiled in (True,) if args.compiled else (True, False):
            name = "compiled" if compiled else "Python"
            rounds = 200 if compiled else 10
            print(f"{name} builder: {cpu_per_event(compiled, rounds):.3f} us of CPU per 1 KB event (load {load:.2f})")


if __name__ == "__main__":
    main()
