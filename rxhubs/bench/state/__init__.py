"""Scenario ``state`` (a windowed count with committed state): the driver (``_scenario``), its process (``_worker``)."""
