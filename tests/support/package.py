"""Build rxhubs' sdist and wheel once per test run, as a clean clone would, outside the work tree.

``python -m build`` runs on a copy of the files git knows (tracked, plus new files not ignored), so nothing
the developer has lying around (``.venv``, ``node_modules``, caches, an old ``build/``) can sneak into the
distributions, and the build writes nothing into the work tree. It builds the sdist first and the wheel from
that sdist, so a file missing from the sdist fails here too.

The build compiles every Cython module (unoptimized: :func:`_unoptimized_cflags`), so it runs once per
``pytest`` run, not once per xdist worker: the first worker that needs it builds into the run's shared temporary
folder under a file lock, and the others wait for it and use the same files (``tests/test_build.py`` and
``tests/spark/test_discovery.py`` run on different workers).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The top-level modules through which Spark discovers the source by itself (pyspark/sql/worker/lookup_data_sources.py).
DISCOVERY_MODULES = ("pyspark_rxhubs", "pyspark_rxhubs_eventhubs")


@dataclass(frozen=True)
class Distributions:
    sdist: Path
    wheel: Path
    log: str  # what python -m build printed (stdout and stderr)


_built: dict[str, Distributions] = {}


def _source_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temporary folder that every xdist worker sees (a worker's own is a folder inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_distributions(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    """The sdist and the wheel of the work tree, built once per run (the first caller builds, the others wait)."""
    if "dist" in _built:
        return _built["dist"]
    base = _shared_folder(tmp_path_factory) / "rxhubs-package"
    base.mkdir(exist_ok=True)
    with open(base / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        log = base / "build.log"
        if not log.exists():
            _build(base)
        [sdist] = (base / "dist").glob("rxhubs-*.tar.gz")
        [wheel] = (base / "dist").glob("rxhubs-*.whl")
        _built["dist"] = Distributions(sdist, wheel, log.read_text(encoding="utf-8"))
    return _built["dist"]


def _build(base: Path) -> None:
    tree = base / "source"
    shutil.rmtree(tree, ignore_errors=True)  # a build that failed (or was killed) half-way in an earlier call
    for name in _source_files():
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    out = base / "dist"
    shutil.rmtree(out, ignore_errors=True)
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(tree)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "CFLAGS": _unoptimized_cflags()},
    )
    assert result.returncode == 0, f"python -m build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (base / "build.log").write_text(result.stdout + result.stderr, encoding="utf-8")  # last: the build is complete


def _unoptimized_cflags() -> str:
    """Python's own C flags for extensions, but with neither optimization nor debug information (``-O0 -g0``).

    The build proves that the sdist compiles every Cython module into the wheel and that the wheel works, not how
    fast the compiled code runs (that is the editable install's ``-O3``, which the rest of the suite and the
    benchmarks use). Its 7 MB of generated C took 77 s of CPU with ``-O3 -g`` and 28 s with ``-O0 -g0``, the
    whole build included (165 s and 54 s of wall time at load 6-12). ``-fwrapv`` and ``-DNDEBUG`` stay.
    """
    flags = str(sysconfig.get_config_var("CFLAGS") or "").split()
    return " ".join([f for f in flags if not f.startswith(("-O", "-g"))] + ["-O0", "-g0"])


def install_wheel_to(wheel: Path, target: Path) -> Path:
    """``pip install --no-deps --target`` the wheel: a site-packages-like folder for ``PYTHONPATH``."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return target
