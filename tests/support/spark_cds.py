"""A class-data-sharing archive (Java's AppCDS) for the suite's Spark JVMs, made by the suite and kept in the venv.

Each Spark JVM the suite starts (the workers' sessions, the examples, the bench's Spark scenarios, the discovery,
Connect and cluster tests: about 20 a run) loads and links some 18,000 classes from Spark's jars. A dynamic
archive of them (``-XX:ArchiveClassesAtExit`` once, then ``-XX:SharedArchiveFile``) maps most of them instead:
a small driver took about 10 s of CPU instead of 13 (two pairs, load 15). Making the archive costs one small
driver and the dump, about 40 s of CPU, once per venv.

* :func:`archive` names it for this Java, this Spark, the suite's JVM options and the trainer: a new JDK or
  pyspark, or a changed option, names another file, and :func:`build` removes the old one. It lives in
  ``<venv>/rxhubs-spark-cds/`` (git-ignored with the venv, never committed).
* :func:`build` runs ``tests/support/_spark_cds_trainer.py`` with ``-XX:ArchiveClassesAtExit`` to a temporary
  name, checks the result with ``-Xshare:on`` against the trainer's class path and only then renames it into
  place, so a JVM sees the whole archive or none. Any failure (no Java, a JVM without CDS, a full disk) leaves
  no archive and returns why: the JVMs then start as before.
* :func:`options` is what a JVM gets to use it; a JVM whose class path differs (a cluster's daemons) quietly
  falls back to the JDK's own archive (the CDS log is off: no warning reaches a test's output).

tests/conftest.py starts the build in the background when a run holds Spark tests and the archive is missing,
and gives the options to the JVMs started once it exists. ``RXHUBS_SPARK_CDS=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

#: The suite's options for its short-lived JVMs (tests/conftest.py says why); the archive is made with them.
SUITE_JVM_OPTS = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions"
                  " -XX:-BytecodeVerificationRemote")
_QUIET = "-Xlog:cds=off,cds+dynamic=off,class+path=off"
_TRAINER = Path(__file__).with_name("_spark_cds_trainer.py")


def java() -> Path | None:
    """The java that spark-submit runs (``$JAVA_HOME/bin/java``, else the one on the PATH), resolved."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home, "bin", "java")) if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).is_file() else None


def spark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    return jars if jars.is_dir() else None


def archive(folder: Path | None = None, java_bin: Path | None = None, jars: Path | None = None) -> Path | None:
    """The archive's path for this Java, Spark, options and trainer (None without Java or pyspark)."""
    java_bin, jars = java_bin or java(), jars or spark_jars()
    if java_bin is None or jars is None:
        return None
    key = hashlib.sha256()
    stat = java_bin.stat()
    key.update(f"{java_bin}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    release = java_bin.parent.parent / "release"  # JAVA_VERSION="17.0.15" and the build
    if release.is_file():
        key.update(release.read_bytes())
    for jar in sorted(jars.iterdir()):
        stat = jar.stat()
        key.update(f"{jar.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    key.update(SUITE_JVM_OPTS.encode() + _QUIET.encode() + _TRAINER.read_bytes())
    return (folder or Path(sys.prefix) / "rxhubs-spark-cds") / f"spark-{key.hexdigest()[:16]}.jsa"


def options(path: Path) -> str:
    """The JVM options that map ``path`` (with the CDS log off)."""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build(path: Path, timeout: float = 900) -> str | None:
    """Make the archive at ``path`` unless it exists; None when it is there, else why it could not be made."""
    java_bin = java()
    if java_bin is None:
        return "no java"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run on this venv may be making it: wait for that one
            if path.is_file():
                return None
            return _build(path, java_bin, timeout)
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def _build(path: Path, java_bin: Path, timeout: float) -> str | None:
    partial = path.with_suffix(f".{os.getpid()}.partial")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{SUITE_JVM_OPTS} -XX:ArchiveClassesAtExit={partial} {_QUIET}"}
    for stale in path.parent.glob("*.partial"):  # a build killed mid-way (its JVM may have written on)
        stale.unlink()
    try:
        # a session of its own: if this build is cut short, its JVM goes with it (a JVM left alone would write
        # its archive on when its driver is gone)
        trainer = subprocess.Popen([sys.executable, str(_TRAINER)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=path.parent, start_new_session=True)
        try:
            out, err = trainer.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(OSError):
                os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
            raise
        if trainer.returncode != 0 or not partial.is_file():
            return f"the trainer failed ({trainer.returncode}): {err[-500:]}"
        class_path = out.strip().splitlines()[-1]
        check = subprocess.run([str(java_bin), *SUITE_JVM_OPTS.split(), "-Xshare:on",
                                f"-XX:SharedArchiveFile={partial}", "-cp", class_path, "-version"],
                               capture_output=True, text=True, timeout=120)
        if check.returncode != 0:
            return f"the archive does not map: {(check.stdout + check.stderr)[-500:]}"
        partial.replace(path)
        for old in path.parent.glob("spark-*.jsa"):
            if old != path:
                old.unlink()
        return None
    except (OSError, subprocess.SubprocessError, IndexError) as error:
        return f"{type(error).__name__}: {error}"
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
