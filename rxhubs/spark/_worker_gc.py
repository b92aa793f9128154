"""Keep a reused Spark Python worker's long-lived objects out of the collection pyspark runs after every task.

pyspark's daemon runs ``gc.collect()`` after each task of a reused worker (``pyspark/daemon.py``, when
``SPARK_REUSE_WORKER`` is set, Spark's default): a full collection over every object the worker holds, its imports
included (pyspark, pyarrow, azure-eventhub and rxhubs' source: about 58,000 objects, 20-30 ms of CPU each time on
the development machine, about 0.5 us per event of a 50,000-event task). At a read task's start, right after that
collection, the source moves what is alive into the permanent generation (``gc.freeze()``), so the collections
during the task and after it look only at the task's own objects.

Every :data:`SWEEP` tasks the worker unfreezes at the task's end, so that the daemon's collection after it looks
at everything once: a reference cycle that was alive at a freeze and became garbage later (a session opened ahead
and closed in a later task) is freed then, not kept for the worker's life. Only in Spark's reused workers; off with
``RXHUBS_SPARK_GC_FREEZE=0`` in the executors' environment.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["ENV", "SWEEP", "active", "freezing"]

ENV = "RXHUBS_SPARK_GC_FREEZE"
#: Tasks between two full collections (the daemon's, after a task that unfroze).
SWEEP = 16

_tasks = 0


def active() -> bool:
    """Whether this process is a reused Spark worker (pyspark collects after each task) and the freeze is not off.

    Example (a test process is not a Spark worker):
        >>> active()
        False
    """
    if os.environ.get(ENV, "").strip() == "0":
        return False
    return os.environ.get("SPARK_REUSE_WORKER", "").strip() not in ("", "0")


def freezing(reads: Iterator[Any]) -> Iterator[Any]:
    """``reads`` (one task's record batches), with the worker's objects frozen from its start (see the module).

    Example (outside a Spark worker the batches pass as they are, nothing frozen):
        >>> list(freezing(iter([1, 2])))
        [1, 2]
    """
    global _tasks
    if not active():
        yield from reads
        return
    gc.freeze()
    _tasks += 1
    try:
        yield from reads
    finally:
        if _tasks % SWEEP == 0:
            gc.unfreeze()  # the daemon's collection after this task sweeps everything once
