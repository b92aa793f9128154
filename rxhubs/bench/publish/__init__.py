"""Scenario ``publish`` (hub to hub): the driver (``_scenario``) and the trial process of each side (``_worker``)."""
