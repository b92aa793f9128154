"""Compiled twins, loaded only when they were built from the source beside them (a stale build is never used).

rxhubs compiles a few hot modules with Cython in pure-Python mode: one source ``_x_py.py`` (the pure-Python
build, always there) and its compiled build ``_x_c`` (``setup.py``). A build made from an older source (an
editable install whose ``.so`` was not rebuilt after a ``git pull``, a wheel cache) would run code the tests
never saw, so each compiled module carries the SHA-256 of the source it was compiled from: ``setup.py`` defines
it as the C macro ``RXHUBS_SOURCE_SHA256`` for each extension, the ``.pxd`` declares it, and the source exposes it
as ``SOURCE_SHA256`` (empty in the pure-Python build). :func:`load_compiled` compares it with the hash of the
source file installed beside it; on a mismatch it logs one WARNING (once per module and process) and returns
None, so the caller keeps the pure-Python path. ``CONTRIBUTING.md`` says how to add a compiled module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType

__all__ = ["HASH_MACRO", "load_compiled", "source_sha256"]

_log = logging.getLogger("rxhubs.extensions")

#: The C macro each compiled module is built with: the SHA-256 (hex) of its ``_x_py.py`` source.
HASH_MACRO = "RXHUBS_SOURCE_SHA256"

_warned: set[str] = set()


def source_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a source file's bytes: what ``setup.py`` compiles into its build.

    Example:
        >>> import rxhubs._extensions as m
        >>> len(source_sha256(m.__file__))
        64
    """
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _source_file(source: str) -> str | None:
    spec = importlib.util.find_spec(source)  # (finds the file without importing it)
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def load_compiled(compiled: str, source: str, what: str = "") -> tuple[ModuleType | None, str]:
    """The compiled module ``compiled`` if it was built from the current ``source`` module, and why (not).

    Returns ``(module, "compiled build of ...")``, or ``(None, reason)`` when it does not import, is not a
    compiled build, or is stale (a WARNING on the ``rxhubs.extensions`` logger says so, once per process).
    ``what`` names the module in the reasons (default: its import name).

    Example:
        >>> module, why = load_compiled("rxhubs.transport._frames_c", "rxhubs.transport._frames_py")
        >>> module is None or why.startswith("compiled")
        True
    """
    what = what or compiled
    try:
        module = importlib.import_module(compiled)
    except ImportError as exc:  # e.g. the SDK's pyamqp moved
        return None, f"{what} does not import ({exc})"
    name = str(getattr(module, "__file__", ""))
    if not name.endswith((".so", ".pyd")):
        return None, f"{what} was not built (no C compiler or Cython at install)"
    path = _source_file(source)
    if path is None:
        return None, f"the source of {what} ({source}) is not there to check the build against"
    built, current = str(getattr(module, "SOURCE_SHA256", "")), source_sha256(path)
    if built != current:
        why = (
            f"{what} is a stale build: compiled from a source with SHA-256 {built[:12] or '(none)'}, "
            f"the source is now {current[:12]}; rebuild it (python setup.py build_ext --inplace, or reinstall)"
        )
        if compiled not in _warned:
            _warned.add(compiled)
            _log.warning("%s; using the pure-Python path", why)
        return None, why
    return module, f"compiled build of {Path(path).name} ({built[:12]})"
