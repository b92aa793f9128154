"""Suite-wide fixtures. Real components are started by fixture plugins, on free loopback ports:

* ``rxhubs.emulator.pytest_plugin``: ``eventhubs_emulator`` (session) and ``emulator_factory``;
* ``tests.support.azurite``: ``azurite`` (session, can be stopped and restarted) and ``blob_container``.
"""

from __future__ import annotations

pytest_plugins = ["rxhubs.emulator.pytest_plugin", "tests.support.azurite"]
