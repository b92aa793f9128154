"""Emulator tests: the fixtures come from rxhubs.emulator.pytest_plugin (registered in tests/conftest.py)."""

from __future__ import annotations

import logging

# The SDK logs every failed attempt at WARNING/ERROR; tests of refusals would drown the output.
logging.getLogger("azure.eventhub").setLevel(logging.CRITICAL)
