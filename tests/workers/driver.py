"""``python -m tests.workers.driver CONN STORE OUT WORKERS``: run_workers over :func:`pipelines.recording`.

Prints ``started`` once the workers are started, and the summary as JSON when run_workers returns.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import threading
import time

import rxhubs
from tests.workers.pipelines import recording


def main() -> None:
    conn, store, out, workers = sys.argv[1:5]
    threading.Thread(target=lambda: (time.sleep(0.5), print("started", flush=True)), daemon=True).start()
    summary = rxhubs.run_workers(
        functools.partial(recording, conn, store, out), workers=int(workers), owner_prefix="t",
        restart=rxhubs.Backoff(initial=0.5, maximum=2.0, max_retries=3),
    )
    print(json.dumps([dataclasses.asdict(w) for w in summary.workers]), flush=True)
    print(summary, flush=True)


if __name__ == "__main__":
    main()
