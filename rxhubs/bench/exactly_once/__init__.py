"""Scenario ``exactly-once``: the driver (``_scenario``) and the trial process of each side (``_worker``)."""
