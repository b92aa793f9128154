"""Windows, aggregates and clocks for :func:`rxhubs.operators.window` and :func:`rxhubs.operators.scan_state`.

* windows: :func:`tumbling`, :func:`hopping`, :func:`session`;
* aggregates: :func:`count`, :func:`sum`, :func:`min`, :func:`max`, :func:`fold` (your own);
* clocks: :class:`EnqueuedTime` (default), :class:`EventTime` (a timestamp of your own), and :class:`CaughtUp`
  (opt-in: a caught-up idle partition closes its windows);
* what reaches you: :class:`WindowBatch` (``results``: :class:`WindowResult`, ``late``) and :class:`ScanBatch`.

Example:
    >>> import datetime as dt
    >>> from rxhubs import operators as hops, windows as hw
    >>> per_device = hops.window(
    ...     "per_device", key=lambda e: e.properties["device"], windows=hw.tumbling(dt.timedelta(minutes=1)),
    ...     aggregate=hw.count(), grace=dt.timedelta(seconds=10))
    >>> callable(per_device)
    True
"""

from __future__ import annotations

from rxhubs.state._spec import (
    ScanBatch,
    WindowBatch,
    WindowResult,
    count,
    fold,
    hopping,
    max,
    min,
    session,
    sum,
    tumbling,
)
from rxhubs.state._time import CaughtUp, EnqueuedTime, EventTime

__all__ = [
    "CaughtUp", "EnqueuedTime", "EventTime", "ScanBatch", "WindowBatch", "WindowResult", "count", "fold",
    "hopping", "max", "min", "session", "sum", "tumbling",
]  # fmt: skip
