"""A compiled build made from an older source is never used: one WARNING, then the pure-Python path.

The compiled frame reader carries the SHA-256 of the ``_frames_py.py`` it was compiled from (``setup.py``);
``rxhubs._extensions.load_compiled`` compares it with the source beside it at import.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rxhubs
from rxhubs import _extensions
from rxhubs.transport import _frames_py, _framing_py
from rxhubs.transport._frames import compiled_reader, extensions_disabled

_SHOW = (
    "import rxhubs; print(rxhubs.__file__); from rxhubs.transport._frames import receive_path; print(receive_path())"
)


def _built() -> None:
    if not extensions_disabled():
        assert compiled_reader() is not None, "make test builds the compiled frame reader"


def test_the_build_in_use_was_compiled_from_todays_source() -> None:
    _built()
    reader = compiled_reader()
    assert reader is not None and str(reader.__file__).endswith(".so")
    assert _extensions.source_sha256(_framing_py.__file__) == reader.SOURCE_SHA256
    decoder = sys.modules["rxhubs.transport._frames_c"]  # (the half the framing cimports)
    assert str(decoder.__file__).endswith(".so")
    assert _extensions.source_sha256(_frames_py.__file__) == decoder.SOURCE_SHA256 != reader.SOURCE_SHA256
    assert _frames_py.SOURCE_SHA256 == _framing_py.SOURCE_SHA256 == ""  # the pure-Python builds carry none


def test_a_build_checked_against_another_source_is_refused_with_one_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _built()
    monkeypatch.setattr(_extensions, "_warned", set())
    caplog.set_level(logging.WARNING, logger="rxhubs.extensions")
    for _ in range(2):
        module, why = _extensions.load_compiled("rxhubs.transport._frames_c", "rxhubs.transport._frames", "the reader")
        assert module is None
        assert why.startswith("the reader is a stale build: compiled from a source with SHA-256 "), why
    warnings = [r.getMessage() for r in caplog.records if r.name == "rxhubs.extensions"]
    assert len(warnings) == 1 and warnings[0].endswith("; using the pure-Python path"), warnings


@pytest.mark.parametrize("half", ["_frames_py.py", "_framing_py.py"])
def test_an_edited_source_beside_an_old_build_runs_the_pure_path(tmp_path: Path, half: str) -> None:
    """A copy of the package whose decoder or framing source changed after the build (a git pull, no rebuild)."""
    _built()
    package = Path(rxhubs.__file__).parent
    copy = tmp_path / "rxhubs"
    shutil.copytree(package, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.c"))
    source = copy / "transport" / half
    source.write_text(source.read_text() + "\n# edited after the build\n")
    env = {k: v for k, v in os.environ.items() if k != "RXHUBS_NO_EXTENSIONS"}
    env["PYTHONPATH"] = str(tmp_path)
    shown = subprocess.run(
        [sys.executable, "-c", _SHOW], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    location, path = shown.stdout.splitlines()
    assert location == str(copy / "__init__.py")  # the copy ran, not the work tree
    what = "the compiled frame reader" + ("'s framing" if half == "_framing_py.py" else "")
    assert path.startswith(f"pure-Python ({what} is a stale build: compiled from a source"), path
    assert shown.stderr.count("stale build") == 1 and "using the pure-Python path" in shown.stderr, shown.stderr

    # and the same copy with the source as built: the compiled reader
    shutil.copy2(package / "transport" / half, source)
    shown = subprocess.run(
        [sys.executable, "-c", _SHOW], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.stdout.splitlines()[1].startswith("native (compiled frame reader"), shown.stdout + shown.stderr
    assert "stale" not in shown.stderr
