"""A fixture that makes a suite fail when a receiver it expects on the native path silently left it.

The suites that prove faults, contracts and liveness (``tests/faults``, ``tests/transport``, ``tests/sources``)
use it autouse through their ``conftest.py``: every link a test's receivers open in this process is recorded
with its path (:mod:`rxhubs.transport._paths`), and the test fails at teardown if one fell back to the SDK's
loop or its public ``receive_batch`` without being asked to (``RXHUBS_NO_EXTENSIONS=1`` and
``RXHUBS_DIRECT_RECEIVE=0`` are asked-for paths, as the ``pure``/``public`` cases set them). Links opened in
other processes (the kill tests' workers) are not seen here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rxhubs.transport import _paths


def fallback_report(links: list[_paths.LinkPath]) -> str:
    """One line per link that fell back, for the failure message."""
    return "; ".join(f"partition {link.partition_id} read on {link.path}: {link.why}" for link in links)


@pytest.fixture(autouse=True)
def native_receive_path() -> Iterator[None]:
    """Fails the test when one of its receivers left the native path without being asked to (module docstring)."""
    _paths.reset()
    yield
    fell = _paths.fallbacks()
    assert not fell, f"a receiver expected on the native path fell back: {fallback_report(fell)}"


#: ``RXHUBS_NO_EXTENSIONS=1`` asks for the pure-Python build: a test that asserts the compiled build in use (its
#: twin's case, or what only the compiled path does) does not apply then, and says why; the compiled build runs it.
PURE_ASKED = os.environ.get("RXHUBS_NO_EXTENSIONS", "").strip() not in ("", "0")
compiled_only = pytest.mark.skipif(
    PURE_ASKED, reason="asserts the compiled build in use; RXHUBS_NO_EXTENSIONS=1 asks for the pure one"
)
