"""The frame reader in use: the compiled build of ``_frames_py`` when it is there, else none (the SDK's path).

rxhubs ships its AMQP frame reader as one Python source, ``_frames_py.py``, that a source install also compiles
with Cython into ``_frames_c`` (``setup.py``; optional: no compiler, no extension). This module chooses once, at
import: the compiled reader, unless ``RXHUBS_NO_EXTENSIONS=1`` is set, it did not build or import, or it is a stale
build of an older ``_frames_py.py`` (:mod:`rxhubs._extensions`: one WARNING, then the pure path). Receivers
read at native speed only with the compiled reader (:mod:`rxhubs.transport._native`); without it they keep the
SDK's pure-Python receive path, since the Python build of the reader is no faster than pyamqp's own decoder (it
exists so that both builds pass the same tests). :func:`receive_path` names the path in use; one INFO line on
the ``rxhubs.transport`` logger says it when the first receiver opens.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from rxhubs._extensions import load_compiled

__all__ = [
    "NO_EXTENSIONS_VARIABLE", "compiled_reader", "event_wrapper", "extensions_disabled", "log_receive_path",
    "receive_path",
]

_log = logging.getLogger("rxhubs.transport")

#: Set to ``1`` to make rxhubs use no compiled code (the pure-Python receive path).
NO_EXTENSIONS_VARIABLE = "RXHUBS_NO_EXTENSIONS"

_said = False


def _disabled() -> bool:
    return os.environ.get(NO_EXTENSIONS_VARIABLE, "").strip() not in ("", "0")


def _load() -> tuple[ModuleType | None, str]:
    """The compiled reader and why it is (not) used: not when disabled, not built, or stale (rxhubs._extensions)."""
    if _disabled():
        return None, f"{NO_EXTENSIONS_VARIABLE} is set"
    module, why = load_compiled(
        "rxhubs.transport._frames_c", "rxhubs.transport._frames_py", "the compiled frame reader"
    )
    return (module, "compiled frame reader") if module is not None else (None, why)


_READER, _WHY = _load()


def event_wrapper() -> Callable[[list[Any]], list[Any]]:
    """``received_messages`` of the compiled ``_events_c`` where the frame reader is compiled, else of ``_events_py``.

    Example:
        >>> event_wrapper().__name__
        'received_messages'
    """
    if compiled_reader() is not None:
        module, _ = load_compiled("rxhubs.transport._events_c", "rxhubs.transport._events_py", "the compiled events")
        if module is not None:
            return module.received_messages  # type: ignore[no-any-return]
    from rxhubs.transport import _events_py

    return _events_py.received_messages


def extensions_disabled() -> bool:
    """True when the user asked for no compiled code (``RXHUBS_NO_EXTENSIONS=1``): the pure path is chosen.

    Example:
        >>> extensions_disabled() == (os.environ.get(NO_EXTENSIONS_VARIABLE, "0") not in ("", "0"))
        True
    """
    return _disabled()


def compiled_reader() -> ModuleType | None:
    """The compiled frame reader module, or None when receivers keep the pure-Python path.

    Example:
        >>> compiled_reader() is None or compiled_reader().parse.__name__ == "parse"
        True
    """
    return None if _disabled() else _READER


def receive_path() -> str:
    """One line naming the receive path in use and why (shown by ``rxhubs --version`` and ``rxhubs doctor``).

    Example:
        >>> receive_path().startswith(("native", "pure-Python"))
        True
    """
    if compiled_reader() is not None:
        return f"native ({_WHY}: {_READER.__file__.rsplit('/', 1)[-1]})"  # type: ignore[union-attr]
    why = f"{NO_EXTENSIONS_VARIABLE} is set" if _disabled() else _WHY
    return f"pure-Python ({why})"


def log_receive_path() -> None:
    """Say once per process, at INFO on ``rxhubs.transport``, which receive path is in use."""
    global _said
    if not _said:
        _said = True
        _log.info("receive path: %s", receive_path())
