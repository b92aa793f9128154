"""Real components for benchmarks, each in its own process so it does not share our GIL."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rxhubs.errors import EmulatorError

_EMULATOR = """
import sys, json
from rxhubs.emulator import BackgroundEmulator
hubs = json.loads(sys.argv[1])
groups = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
with BackgroundEmulator(hubs, consumer_groups=groups) as emulator:
    print(json.dumps({h: emulator.connection_string(h) for h in hubs}), flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def emulator_process(
    hubs: Mapping[str, int], *, consumer_groups: Sequence[str] = ()
) -> Iterator[dict[str, str]]:
    """An emulator in a child process; yields hub name -> connection string; stops when the block ends.

    ``consumer_groups`` are created besides ``$Default`` (e.g. to read the same hub twice, side by side).
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _EMULATOR, json.dumps(dict(hubs)), json.dumps(list(consumer_groups))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise EmulatorError("the benchmark emulator did not start")
        yield json.loads(line)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_worker(module: str, args: list[str], env: Mapping[str, str], timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m module args`` and parse the JSON object it prints last."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args], env={**os.environ, **env},
        capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{module} {' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def prefill(connection_string: str, partitions: int, events: int, body: bytes) -> None:
    """``events`` copies of ``body``, spread evenly over partitions ``0..partitions-1``, sent in full batches.

    Example:
        >>> prefill(emulator.connection_string("bench"), 4, 40_000, b"x" * 512)  # doctest: +SKIP
    """
    from azure.eventhub import EventData, EventHubProducerClient

    per_partition = events // partitions
    with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for p in range(partitions):
            left = per_partition
            while left:
                batch = producer.create_batch(partition_id=str(p))
                n = 0
                while n < left:
                    try:
                        batch.add(EventData(body))
                    except ValueError:
                        break
                    n += 1
                producer.send_batch(batch)
                left -= n
