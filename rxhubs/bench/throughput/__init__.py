"""Scenario ``throughput``: the driver (``_scenario``), the trial process (``_worker``), its profile (``_profile``)."""
