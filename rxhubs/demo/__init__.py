"""The demo behind ``rxhubs demo``: emulator, balanced consumer processes, checkpoints, Spark sink.

:func:`run_demo` starts an emulator in this process, produces a steady stream into a hub, runs consumer
processes (:mod:`rxhubs.demo._consumer`: one :func:`rxhubs.run_workers` pool) that balance the partitions
through one SQLite checkpoint store,
adds one consumer and stops another along the way, shows ownership, checkpoints and lag live, and at the
end reads every written event back to prove none was lost.
"""

from rxhubs.demo._orchestrator import DemoOptions, run_demo
from rxhubs.demo._view import DemoSummary

__all__ = ["DemoOptions", "DemoSummary", "run_demo"]
