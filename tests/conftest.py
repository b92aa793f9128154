"""Suite-wide fixtures. Real components (emulator, Azurite, Spark) are started by fixture plugins."""

from __future__ import annotations

pytest_plugins: list[str] = []
