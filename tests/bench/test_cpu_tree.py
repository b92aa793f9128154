"""The CPU of a process tree (``rxhubs bench spark-source``'s events per CPU-second): live and reaped processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rxhubs.bench._cpu_tree import find_descendant, tree_cpu

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")

# A parent that starts a child which burns CPU and exits (the parent reaps it: only its cutime keeps it), then
# a second child that burns CPU and stays alive, then waits to be killed.
_TREE = """
import subprocess, sys, time
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass\\n"
subprocess.run([sys.executable, "-c", burn], check=True)
live = subprocess.Popen([sys.executable, "-c", burn + "print('burnt', flush=True)\\ntime.sleep(60)\\n"],
                        stdout=subprocess.PIPE, text=True)
live.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_the_cpu_of_a_tree_counts_live_descendants_and_the_children_they_reaped() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _TREE, "rxhubs-cpu-tree-probe"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        assert find_descendant(os.getpid(), "rxhubs-cpu-tree-probe") == parent.pid
        seconds = tree_cpu(parent.pid)
        assert seconds is not None
        assert seconds >= 0.7, seconds  # 0.4 s reaped + 0.4 s live (the parent's own start adds to it)
        time.sleep(0.01)
        assert (tree_cpu(os.getpid()) or 0) >= seconds  # the whole tree holds this subtree
    finally:
        for pid in reversed(_below(parent.pid)):
            os.kill(pid, 9)
        parent.wait()


def _below(pid: int) -> list[int]:
    from rxhubs.bench._cpu_tree import descendants

    return descendants(pid)
