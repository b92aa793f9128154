"""Scenario ``workers`` (N processes against one): the driver (``_scenario``), one trial in a process (``_trial``)."""
