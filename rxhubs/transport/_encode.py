"""The encoder in use: the compiled build of ``_encode_py`` when it is there, else none (the SDK's send path).

The send path's mirror of :mod:`rxhubs.transport._frames`: ``_encode_py.py`` is one Python source that a source
install also compiles with Cython into ``_encode_c`` (``setup.py``; optional). This module chooses once, at import:
the compiled encoder, unless ``RXHUBS_NO_EXTENSIONS=1`` is set or it did not build or import. Sends go through
the native path (:mod:`rxhubs.transport._native_send`) only with the compiled encoder; without it they keep
azure-eventhub's ``send_batch``, and one INFO line on the ``rxhubs.transport`` logger says so (and why) at the
first send.
"""

from __future__ import annotations

import logging
from types import ModuleType

from rxhubs._extensions import load_compiled
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, extensions_disabled

__all__ = ["compiled_encoder", "log_send_path", "send_path"]

_log = logging.getLogger("rxhubs.transport")

_said = False


def _load() -> tuple[ModuleType | None, str]:
    """The compiled encoder and why it is (not) used: not when disabled, not built, or stale (rxhubs._extensions)."""
    if extensions_disabled():
        return None, f"{NO_EXTENSIONS_VARIABLE} is set"
    module, why = load_compiled("rxhubs.transport._encode_c", "rxhubs.transport._encode_py", "the compiled encoder")
    return (module, "compiled encoder") if module is not None else (None, why)


_ENCODER, _WHY = _load()


def compiled_encoder() -> ModuleType | None:
    """The compiled encoder module, or None when sends keep azure-eventhub's path.

    Example:
        >>> compiled_encoder() is None or compiled_encoder().batch_frames.__name__ == "batch_frames"
        True
    """
    return None if extensions_disabled() else _ENCODER


def send_path() -> str:
    """One line naming the send path in use and why.

    Example:
        >>> send_path().startswith(("native", "azure-eventhub"))
        True
    """
    if compiled_encoder() is not None:
        return f"native ({_WHY}: {_ENCODER.__file__.rsplit('/', 1)[-1]})"  # type: ignore[union-attr]
    why = f"{NO_EXTENSIONS_VARIABLE} is set" if extensions_disabled() else _WHY
    return f"azure-eventhub's send_batch ({why})"


def log_send_path(reason: str | None = None) -> None:
    """Say once per process, at INFO on ``rxhubs.transport``, which send path is in use (``reason``: why not native)."""
    global _said
    if not _said:
        _said = True
        _log.info("send path: %s", send_path() if reason is None else f"azure-eventhub's send_batch ({reason})")
