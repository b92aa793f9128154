"""Suite-wide fixtures. Real components are started by fixture plugins, on free loopback ports:

* ``rxhubs.emulator.pytest_plugin``: ``eventhubs_emulator`` (session) and ``emulator_factory``;
* ``tests.support.azurite``: ``azurite`` (session, can be stopped and restarted) and ``blob_container``.
"""

from __future__ import annotations

import doctest

import pytest

pytest_plugins = ["rxhubs.emulator.pytest_plugin", "tests.support.azurite"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every docstring example runs, except those marked +SKIP: illustrations that need a live service."""
    keep, drop = [], []
    for item in items:
        dt = getattr(item, "dtest", None)
        if dt is not None and dt.examples and all(e.options.get(doctest.SKIP) for e in dt.examples):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
