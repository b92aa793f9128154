"""Emulator test fixtures: the plugin's fixtures (until the suite registers the plugin) and SDK helpers."""

from __future__ import annotations

import logging

from rxhubs.emulator.pytest_plugin import (  # noqa: F401  (fixtures)
    emulator_factory,
    eventhubs_emulator,
    eventhubs_emulator_config,
)

# The SDK logs every failed attempt at WARNING/ERROR; tests of refusals would drown the output.
logging.getLogger("azure.eventhub").setLevel(logging.CRITICAL)
