"""Scenario ``handover`` (how long a moved partition waits): the driver (``_scenario``), the consumer (``_worker``)."""
