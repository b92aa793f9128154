"""The installed azure-eventhub version's sdist, downloaded once per checkout into the git-ignored ``.cache/``.

The official samples (test_official_samples.py, test_official_identity_samples.py) and live tests
(test_official_live_tests.py) come from it, unmodified; each part is extracted once beside the archive.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache"


def _archive(version: str) -> Path:
    """The sdist's ``.tar.gz`` (pip downloads it the first time)."""
    target = CACHE / f"azure_eventhub-{version}.tar.gz"
    if target.is_file():
        return target
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"azure-eventhub=={version}", "--no-binary",
                        ":all:", "--no-deps", "--disable-pip-version-check", "-q", "-d", tmp],
                       check=True, capture_output=True, timeout=90)
        (sdist,) = Path(tmp).glob("azure_eventhub-*.tar.gz")
        os.replace(sdist, target)
    return target


def sdist_part(part: str, keep: Callable[[str], bool]) -> Path:
    """The sdist's ``part`` folder (``samples``, ``tests``), holding the files whose archive names ``keep`` takes."""
    version = importlib.metadata.version("azure-eventhub")
    target = CACHE / f"azure-eventhub-{version}-{part}"
    if target.is_dir():  # (put there whole by one rename)
        return target
    archive_path = _archive(version)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        with tarfile.open(archive_path) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and keep(m.name)]
            archive.extractall(tmp, members=members, filter="data")
        (found,) = Path(tmp).glob(f"*/{part}")
        with contextlib.suppress(OSError):  # another run may have put it there first
            os.replace(found, target)
    return target
