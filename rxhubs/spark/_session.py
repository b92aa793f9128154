"""SparkSession handling: a local session that works out of the box, or the user's own.

A local session needs three things that Spark's defaults get wrong on many machines: it must bind the
loopback address (``SPARK_LOCAL_IP``, ``spark.driver.host``, ``spark.driver.bindAddress``), its Python
workers must run this interpreter (``PYSPARK_PYTHON``; else they start the system Python, which may lack
pyarrow, and fail only after a timeout), and Arrow must be enabled. The rest keeps logs and resources
quiet: no UI, no console progress bars, shuffle partitions sized for one machine, session time zone UTC.

``PYSPARK_PYTHON`` is ``_worker_python.sh``, which runs this interpreter (``RXHUBS_SPARK_PYTHON``) and starts
a streaming source's runner so that it connects back to the JVM before its imports: Spark gives that one
process 10 s, fixed, and on a loaded machine its imports alone took longer (``_worker_start.py``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["LOCAL_CONF", "get_or_create_session", "local_session", "worker_python"]

#: Settings :func:`local_session` applies (``conf`` entries win).
LOCAL_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

_lock = threading.Lock()
_WRAPPER = Path(__file__).with_name("_worker_python.sh")


def worker_python() -> str:
    """What ``PYSPARK_PYTHON`` should be: ``_worker_python.sh`` where a POSIX shell runs it, else this interpreter.

    :func:`local_session` uses it. **Building your own session**, set ``PYSPARK_PYTHON`` (and
    ``spark.pyspark.python``) to it before the session starts: Spark gives the process that runs a streaming
    source's driver side a fixed 10 s to connect back to the JVM, and the wrapper connects before the slow
    imports (docs/spark.md, "Your own SparkSession"). It also sets ``RXHUBS_SPARK_PYTHON`` (the interpreter the
    wrapper runs: this one) unless it is set.

    Example:
        >>> import os, rxhubs.spark
        >>> python = rxhubs.spark.worker_python()
        >>> python.endswith("_worker_python.sh") or python == os.environ["RXHUBS_SPARK_PYTHON"]
        True
    """
    os.environ.setdefault("RXHUBS_SPARK_PYTHON", sys.executable)
    if os.name == "posix" and os.access(_WRAPPER, os.X_OK):
        return str(_WRAPPER)
    return os.environ["RXHUBS_SPARK_PYTHON"]


def _cores(master: str) -> int:
    inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "*"
    if inner.isdigit():
        return max(1, int(inner))
    return os.cpu_count() or 2


def local_session(
    *,
    master: str = "local[*]",
    app_name: str = "rxhubs",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A local ``SparkSession`` that starts cleanly on a developer machine or a CI runner.

    Sets ``SPARK_LOCAL_IP=127.0.0.1`` and ``PYSPARK_PYTHON`` (to this interpreter, through a small wrapper that
    lets a streaming source start on a loaded machine: see docs/spark.md, "Sessions") unless already set, then
    builds the session with :data:`LOCAL_CONF`, ``spark.pyspark.python`` and ``spark.sql.shuffle.partitions``
    equal to the local core count. If a session already runs in this process, Spark returns it (static
    settings such as the master cannot change then). Takes about 5 s the first time.

    Args:
        master: The Spark master; ``local[*]`` uses every core, ``local[2]`` two.
        app_name: The application name.
        conf: More Spark settings, applied last (e.g. ``{"spark.driver.memory": "2g"}``).

    Returns:
        A ``pyspark.sql.SparkSession``.

    Example:
        >>> spark = local_session(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})  # doctest: +SKIP
        >>> spark.range(3).count()  # doctest: +SKIP
        3
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "PYSPARK_PYTHON" not in os.environ:
        os.environ.setdefault("RXHUBS_SPARK_PYTHON", sys.executable)
        os.environ["PYSPARK_PYTHON"] = worker_python()
    settings = {
        **LOCAL_CONF,
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.sql.shuffle.partitions": str(_cores(master)),
    }
    if os.environ["PYSPARK_PYTHON"] == str(_WRAPPER):
        # executors started by a cluster's worker get their environment from it, not from this process: tell
        # them which interpreter the wrapper runs (without it, a standalone cluster's executors ran the system
        # python3, which lacked pyarrow)
        settings["spark.executorEnv.RXHUBS_SPARK_PYTHON"] = os.environ.get("RXHUBS_SPARK_PYTHON", sys.executable)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _lock:
        return builder.getOrCreate()


def get_or_create_session(spark: Any = None) -> Any:
    """The session to write with: ``spark`` if given, else the session already running, else :func:`local_session`.

    Pass your own session (a cluster's, or a Spark Connect one) to :func:`rxhubs.spark.write` as ``spark=``;
    without one, the session the program already started is used, and only if there is none a local one is
    started. Safe to call from several threads.

    Example:
        >>> get_or_create_session(my_cluster_session) is my_cluster_session  # doctest: +SKIP
        True
    """
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    with _lock:
        active = SparkSession.getActiveSession()
        if active is None:
            try:
                active = SparkSession.active()
            except Exception:  # pyspark raises its own error type when none is running
                active = None
    return active if active is not None else local_session()
